"""A detection-style training step whose loss selects a different number of anchors every step.

Run `python -m benchmarks.dynamic_shapes [--steps 300]
[--modes eager,partial,partial_ladder,xla,torch_eager] [--cache-dir DIR] [--quick]`.

Model: three 3x3 convolutions with ReLU on 8 images of 3x16x16 give per-location features; a
linear head predicts 2 anchors per location (512 per image) of 4 box deltas and one objectness
logit: `out` (8, 512, 5). Positives: anchors whose synthetic IoU-like score is above the batch's
threshold (one per batch, part of the data, drawn so that every step has a count of its own,
from 16 to half the anchors). Loss: smooth L1 of the box columns over the positives only
(`out[pos]`, `tgt[pos]`: a data-dependent shape) + objectness BCE with logits over all anchors;
SGD with momentum. The seeded numpy data are made up front, the same for every mode; PyTorch
starts from the eager model's initial weights.

Modes, each in a fresh child process: `eager` (op by op), `partial` (backbone under
`partial_trace`; head, selection and loss eager), `partial_ladder` (the same with
`small_source=0`: the selection reads its count on the host and takes a capacity from the
ladder, as selections from more than 4096 candidates do), `xla` (the whole step under
`xla_trace`; "unsupported: <error>" if that raises), `torch_eager` (2 threads; left out, with a
note, when torch is missing). PyTorch runs first and again last; the ratios are against the
faster of its two runs (total and median separately), as the machine's speed drifts.
Per mode: total wall time of all steps from the first (compiles included), median step after the
warm-up steps, jax's compile events per 100 steps and in the last 100 (a load from the
persistent cache counts as one too: the table says how many were loads), the final loss, and the
largest relative difference of the loss curve from PyTorch's.

Children run without a persistent compilation cache (`PARTIAL_CACHE_DIR` empty, jax's cache
off). With `--cache-dir DIR` each jax mode runs twice with the cache in `DIR/<mode>`: the first
process fills it, the second reuses it. The goals: total time at most 5x PyTorch eager's
without the cache and 1.5x with it (second process); partial's median step at most 1.25x PyTorch
eager's; no compiles once the shape buckets have been seen; xla compiles once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import jax
import numpy as np

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
import xla_segments
from benchmarks.compiles import count_compiles
from eager.autodiff import GradManager
from partial import partial_trace, set_cache_dir, xla_trace

JAX_MODES = ("eager", "partial", "partial_ladder", "xla")
MODES = (*JAX_MODES, "torch_eager")
MARK = "RESULT "  # the child's JSON line starts with this


@dataclass(frozen=True)
class Config:
    batch: int = 8
    channels: int = 3
    size: int = 16  # images are size x size; one feature vector per pixel
    per_loc: int = 2  # anchors per location: size * size * per_loc anchors per image
    width: int = 32  # feature channels
    min_pos: int = 16  # fewest positives in a batch
    lr: float = 0.01
    momentum: float = 0.9

    @property
    def anchors(self) -> int:
        return self.size * self.size * self.per_loc


QUICK = Config(batch=2, channels=8, size=8, width=8, min_pos=4)  # conv weights of one shape


# ----- data -------------------------------------------------------------------------------------
def make_data(cfg: Config, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Images, per-anchor scores, per-batch thresholds and box targets for every step. The
    thresholds sit between two sorted scores, so that the positive counts of the steps are
    distinct values (as long as the range allows) spread from `min_pos` to half the anchors."""
    rng = np.random.default_rng([seed, 7])
    n = cfg.batch * cfg.anchors
    x = rng.standard_normal((steps, cfg.batch, cfg.channels, cfg.size, cfg.size))
    score = rng.uniform(0.0, 1.0, (steps, cfg.batch, cfg.anchors)).astype(np.float32)
    tgt = rng.standard_normal((steps, cfg.batch, cfg.anchors, 4))
    span = np.arange(cfg.min_pos, n // 2 + 1)
    counts = rng.choice(span, steps, replace=steps > len(span))
    ordered = -np.sort(-score.reshape(steps, -1).astype(np.float64), axis=1)  # descending
    rows = np.arange(steps)
    thr = 0.5 * (ordered[rows, counts - 1] + ordered[rows, counts])
    return {"x": x.astype(np.float32), "score": score,
            "thr": thr.astype(np.float32), "tgt": tgt.astype(np.float32)}


def positive_counts(data: dict[str, np.ndarray]) -> np.ndarray:
    """The number of positives of each step, as the step computes it (score > threshold)."""
    return (data["score"] > data["thr"][:, None, None]).sum(axis=(1, 2))


# ----- the eager model and steps ----------------------------------------------------------------
class Backbone(M.Module):
    """Three 3x3 convolutions with ReLU; per-location features (B, H*W, width)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.width = cfg.width
        self.conv1 = M.Conv2d(cfg.channels, cfg.width, 3, padding=1)
        self.conv2 = M.Conv2d(cfg.width, cfg.width, 3, padding=1)
        self.conv3 = M.Conv2d(cfg.width, cfg.width, 3, padding=1)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        h = F.relu(self.conv3(F.relu(self.conv2(F.relu(self.conv1(x))))))
        return h.reshape(h.shape[0], self.width, -1).transpose(0, 2, 1)


class Detector(M.Module):
    """The backbone and a linear head: per location `per_loc` anchors of 4 deltas + 1 logit."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.backbone = Backbone(cfg)
        self.head = M.Linear(cfg.width, cfg.per_loc * 5)


def eager_loss(out: eg.Tensor, score: eg.Tensor, thr: eg.Tensor, tgt: eg.Tensor) -> eg.Tensor:
    """Smooth L1 of the box columns over the positives + objectness BCE over all anchors."""
    pos = score > thr
    box = F.smooth_l1_loss(out[pos][:, :4], tgt[pos])
    obj = F.binary_cross_entropy(out[:, :, 4], pos.astype("float32"), with_logits=True)
    return box + obj


def eager_step(mode: str, cfg: Config, seed: int) -> tuple[Callable, dict[str, np.ndarray]]:
    """A step `step(x, score, thr, tgt) -> loss` of `mode`, and the model's initial weights."""
    eg.random.seed(seed)
    model = Detector(cfg)
    init = dict(model.state_dict())
    params = model.parameters()
    opt = optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)
    gm = GradManager().attach(params)
    features = partial_trace(model.backbone) if mode.startswith("partial") else model.backbone

    def step(x: eg.Tensor, score: eg.Tensor, thr: eg.Tensor, tgt: eg.Tensor) -> eg.Tensor:
        with gm:
            out = model.head(features(x)).reshape(x.shape[0], cfg.anchors, 5)
            loss = eager_loss(out, score, thr, tgt)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    return (xla_trace(step) if mode == "xla" else step), init


# ----- PyTorch ----------------------------------------------------------------------------------
def torch_step(cfg: Config, init: dict[str, np.ndarray]) -> Callable:
    """The same step in PyTorch eager, from the weights `init` (eager state_dict names)."""
    import torch
    import torch.nn.functional as TF
    from torch import nn

    torch.set_num_threads(2)
    bb = nn.ModuleDict({f"conv{i}": nn.Conv2d(cfg.width if i > 1 else cfg.channels, cfg.width,
                                              3, padding=1) for i in (1, 2, 3)})
    model = nn.ModuleDict({"backbone": bb, "head": nn.Linear(cfg.width, cfg.per_loc * 5)})
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in init.items()})
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, foreach=True)

    def step(x: Any, score: Any, thr: Any, tgt: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        h = TF.relu(bb["conv3"](TF.relu(bb["conv2"](TF.relu(bb["conv1"](x))))))
        out = model["head"](h.flatten(2).transpose(1, 2)).reshape(x.shape[0], cfg.anchors, 5)
        pos = score > thr
        box = TF.smooth_l1_loss(out[pos][:, :4], tgt[pos])
        loss = box + TF.binary_cross_entropy_with_logits(out[:, :, 4], pos.float())
        loss.backward()
        opt.step()
        return loss.detach()

    return step


# ----- the child: one mode in this process ------------------------------------------------------
def timed_steps(step: Callable, batches: list[tuple], to_float: Callable) -> dict[str, Any]:
    """Run every batch through `step`, reading each loss. Per step: seconds, loss, and (running
    totals) jax's compile events and, of those, executables loaded from the persistent cache
    (jax reports a cache load as a compile too)."""
    times, losses, compiles, loads, hits = [], [], [], [], [0]

    def on_event(event: str, **kwargs: Any) -> None:
        hits[0] += event in ("/jax/compilation_cache/cache_hits", "/eager/persistent_cache/hits")

    jax.monitoring.register_event_listener(on_event)
    try:
        with count_compiles() as seen:
            start = time.perf_counter()
            for batch in batches:
                t0 = time.perf_counter()
                losses.append(to_float(step(*batch)))  # reading the loss waits for the step
                times.append(time.perf_counter() - t0)
                compiles.append(seen.count)
                loads.append(hits[0])
            total = time.perf_counter() - start
    finally:
        jax.monitoring.unregister_event_listener(on_event)
    return {"total_s": total, "times": times, "losses": losses, "compiles": compiles,
            "cache_loads": loads, "compiled": seen.names}


def configure_cache(cache_dir: str | None) -> None:
    """Turn the persistent compilation cache on (in `cache_dir`) or make sure it is off."""
    set_cache_dir(cache_dir)
    jax.config.update("jax_enable_compilation_cache", cache_dir is not None)


def run_mode(mode: str, cfg: Config, steps: int, seed: int = 0) -> dict[str, Any]:
    """Train `steps` steps in `mode` in this process: the child's result (JSON-ready)."""
    data = make_data(cfg, steps, seed)
    keys = ("x", "score", "thr", "tgt")
    result: dict[str, Any] = {"mode": mode, "status": "ok", "steps": steps}
    if mode == "torch_eager":
        import torch

        _, init = eager_step("eager", cfg, seed)
        step, to_float = torch_step(cfg, init), float
        batches = [tuple(torch.from_numpy(np.asarray(data[k][i])) for k in keys)
                   for i in range(steps)]
    else:
        result["cache_dir"] = xla_segments.cache_dir()
        if mode == "partial_ladder":
            eg.set_ragged_buckets(2.0, small_source=0)
        step, _ = eager_step(mode, cfg, seed)
        to_float = lambda loss: float(loss.item())  # noqa: E731
        batches = [tuple(eg.tensor(data[k][i]) for k in keys) for i in range(steps)]
    try:
        result |= timed_steps(step, batches, to_float)
    except Exception as e:  # xla: masked selection in a region may not be supported yet
        if mode != "xla":
            raise
        result["status"] = f"unsupported: {type(e).__name__}: {e}"
    return result


def summarize(result: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Add the median step after `warmup` steps, compiles per 100 steps and in the last 100."""
    if result["status"] != "ok":
        return result
    times, compiles, steps = result["times"], result["compiles"], result["steps"]
    last = min(100, steps)

    def last_100(totals: list[int]) -> int:
        return totals[-1] - (totals[-last - 1] if steps > last else 0)

    return result | {
        "median_ms": statistics.median(times[min(warmup, steps - 1):]) * 1e3,
        "compiles_per_100": compiles[-1] * 100 / steps,  # torch's are 0: it compiles nothing
        "compiles_last_100": last_100(compiles),
        "cache_loads_last_100": last_100(result["cache_loads"]),
        "final_loss": result["losses"][-1]}


# ----- the parent -------------------------------------------------------------------------------
def child_env(cache: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    env["PARTIAL_CACHE_DIR"] = ""  # off (unset is the user's own cache); `--cache-dir` sets one
    env["JAX_ENABLE_COMPILATION_CACHE"] = "true" if cache else "false"
    return env


def spawn(mode: str, args: argparse.Namespace, cache_dir: str | None = None) -> dict[str, Any]:
    """Run `mode` in a fresh `python -m benchmarks.dynamic_shapes --child` and parse its line."""
    cmd = [sys.executable, "-m", "benchmarks.dynamic_shapes", "--child", mode,
           "--steps", str(args.steps), "--seed", str(args.seed)]
    cmd += ["--quick"] * args.quick + (["--cache-dir", cache_dir] if cache_dir else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(bool(cache_dir)),
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"mode": mode, "status": f"failed (exit {proc.returncode}): {tail[0]}"}
    return json.loads(lines[-1][len(MARK):])


def machine_line() -> str:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return (f"machine: {platform.platform()}, {os.cpu_count()} CPUs, jax {jax.__version__}, "
            f"torch {torch_version}")


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def loaded(n: float) -> str:
    return f" ({n:.{0 if n == int(n) else 1}f} loaded from the cache)" if n else ""


def reference(rows: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """PyTorch's figures: the faster total and the faster median of its runs, the first run's
    loss curve; None without a torch run."""
    runs = [r for _, r in rows if r["mode"] == "torch_eager" and r["status"] == "ok"]
    if not runs:
        return None
    return {"total_s": min(r["total_s"] for r in runs),
            "median_ms": min(r["median_ms"] for r in runs), "losses": runs[0]["losses"]}


def print_table(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """One row per (label, summarized result); ratios against PyTorch's (`reference`)."""
    ref = reference(rows) or {}
    print("| mode | total s | median step ms | compiles/100 steps (all) | compiles in last 100 "
          "steps | final loss | ratio total vs torch_eager | ratio median vs torch_eager |")
    print("| --- |" + " ---: |" * 7)
    for label, r in rows:
        if r["status"] != "ok":
            print(f"| {label} | {r['status'].split(':')[0]} (below) |" + " |" * 6)
            continue
        print(f"| {label} | {r['total_s']:.2f} | {r['median_ms']:.2f} | "
              f"{r['compiles_per_100']:.1f}{loaded(r['cache_loads'][-1] * 100 / r['steps'])} | "
              f"{r['compiles_last_100']}{loaded(r['cache_loads_last_100'])} | "
              f"{r['final_loss']:.5f} | "
              f"{ratio(r['total_s'], ref.get('total_s'))} | "
              f"{ratio(r['median_ms'], ref.get('median_ms'))} |")
    for label, r in rows:
        if r["status"] != "ok":
            print(f"\n{label}: {r['status']}")


def print_agreement(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """The largest relative difference of each jax mode's loss curve from PyTorch's."""
    ref = reference(rows)
    print("\n### Loss curves against PyTorch eager\n")
    if ref is None:
        print("no PyTorch loss curve to compare with")
        return
    want = np.asarray(ref["losses"])
    for label, r in rows:
        if r["mode"] != "torch_eager" and r["status"] == "ok":
            diff = float(np.max(np.abs(np.asarray(r["losses"]) - want) / np.abs(want)))
            verdict = "agrees" if diff < 1e-2 else "DIFFERS"
            print(f"- {label}: max relative difference of the loss curve from torch_eager "
                  f"{diff:.2e} ({verdict}, tolerance 1e-2)")


def print_goals(rows: list[tuple[str, dict[str, Any]]]) -> None:
    """The goals (module docstring) per jax row (1.5x total for a process that reuses the cache)."""
    ref = reference(rows)
    print("\n### Goals\n")
    for label, r in rows:
        if r["mode"] == "torch_eager" or r["status"] != "ok" or ref is None:
            continue
        limit = 1.5 if "reuses" in label else 5.0
        checks = [(f"total {r['total_s'] / ref['total_s']:.1f}x torch", limit,
                   r["total_s"] / ref["total_s"]),
                  (f"{r['compiles_last_100']} compiles in the last 100 steps", 0,
                   r["compiles_last_100"])]
        if r["mode"].startswith("partial"):
            checks.append((f"median step {r['median_ms'] / ref['median_ms']:.2f}x torch", 1.25,
                           r["median_ms"] / ref["median_ms"]))
        if r["mode"] == "xla":
            checks.append((f"{r['compiles'][-1]} compiles in all", 1, r["compiles"][-1]))
        top = sorted(r.get("compiled", {}).items(), key=lambda kv: -kv[1])[:3]
        print(f"- {label}: " + "; ".join(
            f"{text} (goal <= {goal}: {'met' if value <= goal else 'MISSED'})"
            for text, goal, value in checks)
            + "; most compiled: " + (", ".join(f"{n} x{c}" for n, c in top) or "none"))


def run_all(args: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    """Every requested mode in its own process (twice per jax mode with `--cache-dir`)."""
    rows = []
    modes = args.modes.split(",")
    if "torch_eager" in modes:  # first and last: the machine's speed drifts during the run
        modes = ["torch_eager", *[m for m in modes if m != "torch_eager"], "torch_eager"]
    for i, mode in enumerate(modes):
        if mode == "torch_eager" and importlib.util.find_spec("torch") is None:
            if not i:
                print("note: torch does not import: the torch_eager column is left out")
            continue
        cache = (os.path.join(os.path.abspath(args.cache_dir), mode)
                 if args.cache_dir and mode != "torch_eager" else None)
        if mode == "torch_eager":
            runs = [f"torch_eager ({'first' if not i else 'last'})"]
        else:
            runs = [f"{mode} (cache: {run})" for run in
                    ("1st process, fills", "2nd process, reuses")] if cache else [mode]
        for label in runs:
            rows.append((label, spawn(mode, args, cache)))
            print(f"  ran {label}: {rows[-1][1]['status']}", file=sys.stderr, flush=True)
    return [(label, summarize(r, args.warmup)) for label, r in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="steps (default 300; quick 8)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--quick", action="store_true", help="tiny model, few steps (smoke test)")
    parser.add_argument("--cache-dir", default=None,
                        help="run each jax mode twice with this persistent cache: fill, reuse")
    parser.add_argument("--warmup", type=int, default=50, help="steps left out of the median")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.steps = args.steps or (8 if args.quick else 300)
    cfg = QUICK if args.quick else Config()
    if args.child:
        if args.child != "torch_eager":
            configure_cache(args.cache_dir)
        result = run_mode(args.child, cfg, args.steps, args.seed)
        print(MARK + json.dumps(result), flush=True)
        return
    counts = positive_counts(make_data(cfg, args.steps, args.seed))
    print(f"## Dynamic shapes: detection step, {args.steps} steps, {asdict(cfg)}\n")
    print(f"positives per step: {len(set(counts.tolist()))} distinct counts in {args.steps} "
          f"steps, from {counts.min()} to {counts.max()} of {cfg.batch * cfg.anchors} anchors")
    print(machine_line() + "\n")
    rows = run_all(args)
    print_table(rows)
    print_goals(rows)
    print_agreement(rows)


if __name__ == "__main__":
    main()
