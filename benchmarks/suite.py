"""The benchmark suite: every workload in every mode, against pure-jax (and PyTorch) references.

Run `python -m benchmarks [--quick] [--workloads mlp,cnn,gpt,dynamic] [--variants ...]
[--out DIR]`.

Workloads: the three of `benchmarks.workloads` (an MLP, a small ResNet with BatchNorm,
a two-block GPT) and `dynamic`, the MLP with a dynamic head (the mean loss over the samples whose
loss is at or above the batch mean: a data-dependent count that changes nearly every step; eager
code selects them, a ragged tensor, and the pure-jax references mask them at the batch's fixed
size). Variants (`benchmarks.workloads`, `benchmarks.torch_workloads`): `eager`; `partial`
(backbone under `partial_trace`, head eager); `xla` (whole step under `xla_trace`, the selection
a masked computation); the pure-jax references `jax_jit_step` (whole step in one donated
`jax.jit`), `jax_split` (jitted backbone forward and backward, head in op-by-op jax: what an
ideal `partial_trace` costs) and `jax_eager` (no jit); and, when torch is importable,
`torch_eager` and `torch_compile_backbone`.

Protocol: each (workload, variant) runs in a fresh process, which builds the model,
loads the canonical init and moves the batch untimed, then times the first step alone (capture
and compilation included), runs the warmup steps (mlp 10, cnn 5, gpt 5) and times each step
(mlp 100, cnn 30, gpt 50) with `time.perf_counter` around step and sync. Every variant's losses
over the first steps must agree with the first variant's (the implementations do the same work),
else the run is marked MISMATCH. Reported per variant: first-step time, median, min and max step
time, peak resident memory, XLA's peak memory of a whole-step executable where there is one, and
the ratios of medians to `jax_jit_step` and `jax_split`. The results are printed, and written to
DIR (default `benchmarks/results/`) as `results.md`, `results.json` and `results.png`.

`--quick` (under two minutes on 2 cores; not for quoting): all variants of a workload share one
process, 2 warmup and 5 timed steps, the cnn batch is cut to 16 and `torch.compile` is skipped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("mlp", "cnn", "gpt", "dynamic")
REFERENCES = ("jax_jit_step", "jax_split")
QUICK_WARMUP, QUICK_TIMED = 2, 5
QUICK_BATCH = {"cnn": 16}
COMPARE_STEPS = 5  # losses of the first steps every variant must agree on
LOSS_RTOL = 1e-4
GOALS = [("eager", "jax_eager", 1.0, "< 1", "eager faster than op-by-op jax"),
         ("partial", "jax_split", 1.10, "<= 1.10", "partial_trace step vs ideal split step"),
         ("xla", "jax_jit_step", 1.05, "<= 1.05", "xla_trace step vs one jitted step")]


def available_variants(workload: str, quick: bool) -> list[str]:
    """Every variant that applies to `workload` here (torch ones only if torch imports)."""
    from benchmarks.workloads import variants_for

    variants = variants_for(workload)
    if not torch_available():
        return variants
    return variants + ["torch_eager"] + ([] if quick else ["torch_compile_backbone"])


def torch_available() -> bool:
    """Whether torch can be imported (checked without importing it into this process)."""
    return importlib.util.find_spec("torch") is not None


def peak_rss_mb() -> float:
    """This process's peak resident memory. `VmHWM` is per address space (reset by exec);
    `ru_maxrss`, the fallback, would count the parent's size at the fork."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _make_runner(workload: str, variant: str, batch: int | None) -> Any:
    if variant.startswith("torch_"):
        from benchmarks.torch_workloads import VARIANTS as TORCH
        return TORCH[variant](workload, batch)
    from benchmarks.workloads import VARIANTS
    return VARIANTS[variant](workload, batch)


def run_one(workload: str, variant: str, warmup: int, timed: int,
            batch: int | None = None) -> dict[str, Any]:
    """Measure one (workload, variant) in this process; times in seconds."""
    runner = _make_runner(workload, variant, batch)
    first, times, losses = time_steps(runner, warmup, timed)
    step_bytes = runner.step_memory()
    return {
        "workload": workload, "variant": variant, "first_step_s": first, "times_s": times,
        "losses": [runner.float_loss(x) for x in losses],
        "peak_rss_mb": peak_rss_mb(),
        "step_memory_mb": None if step_bytes is None else step_bytes / 2**20,
    }


def time_steps(runner: Any, warmup: int, timed: int) -> tuple[float, list[float], list[Any]]:
    """(first step's seconds, each timed step's seconds, every step's loss) of `runner`: one
    first step (capture and compilation), `warmup` untimed steps, then `timed` timed ones."""
    start = time.perf_counter()
    loss = runner.step()
    runner.sync(loss)
    first = time.perf_counter() - start
    losses = [loss]
    for _ in range(warmup):
        loss = runner.step()
        runner.sync(loss)
        losses.append(loss)
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        loss = runner.step()
        runner.sync(loss)
        times.append(time.perf_counter() - start)
        losses.append(loss)
    return first, times, losses


def child(module: str, args: list[str]) -> list[dict[str, Any]]:
    """Run `python -m <module> --child ...` in a fresh process; the JSON lines it prints."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"inductor-{os.getpid()}-{time.time_ns()}"))
    cmd = [sys.executable, "-m", module, "--child", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def measure_workload(workload: str, variants: list[str], quick: bool) -> list[dict[str, Any]]:
    """Every variant of `workload`: a fresh process each (or, `quick`, one for all)."""
    from benchmarks.workloads import TIMED_STEPS, WARMUP_STEPS, spec_of

    spec = spec_of(workload)
    warmup = QUICK_WARMUP if quick else WARMUP_STEPS[spec]
    timed = QUICK_TIMED if quick else TIMED_STEPS[spec]
    batch = QUICK_BATCH.get(spec) if quick else None
    common = [workload, str(warmup), str(timed), str(batch or 0)]
    if quick:
        return child("benchmarks.suite", [*common, ",".join(variants)])
    return [r for v in variants for r in child("benchmarks.suite", [*common, v])]


def summarize(result: dict[str, Any]) -> dict[str, float]:
    """Median, min, max, mean, p10 and p90 of the timed steps (milliseconds)."""
    ms = np.asarray(result["times_s"]) * 1e3
    return {"median": float(np.median(ms)), "min": float(ms.min()), "max": float(ms.max()),
            "mean": float(ms.mean()), "p10": float(np.percentile(ms, 10)),
            "p90": float(np.percentile(ms, 90))}


def check_losses(results: list[dict[str, Any]]) -> list[str]:
    """Per variant: its first losses and whether they agree with the first variant's."""
    ref = results[0]
    n = min(COMPARE_STEPS, *(len(r["losses"]) for r in results))
    lines = []
    for r in results:
        a, b = np.asarray(r["losses"][:n]), np.asarray(ref["losses"][:n])
        rel = float(np.max(np.abs(a - b) / np.abs(b)))
        r["losses_agree"] = rel <= LOSS_RTOL
        shown = ", ".join(f"{v:.6f}" for v in r["losses"][:n])
        lines.append(f"- {r['variant']}: [{shown}] max rel. diff. vs {ref['variant']} {rel:.1e} "
                     f"({'ok' if r['losses_agree'] else 'MISMATCH'})")
    return lines


def _ratio(med: dict[str, float], a: str, b: str) -> str:
    return f"{med[a] / med[b]:.2f}" if a in med and b in med else "n/a"


def workload_table(workload: str, results: list[dict[str, Any]]) -> list[str]:
    """The markdown table of one workload, with the loss check below it."""
    med = {r["variant"]: summarize(r)["median"] for r in results}
    n_timed = len(results[0]["times_s"])
    lines = [f"### {workload} ({n_timed} timed steps per variant)", "",
             "| variant | first step s | median ms | min ms | max ms | / jax_jit_step | "
             "/ jax_split | peak RSS MB | step memory MB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        s, v = summarize(r), r["variant"]
        memory = f"{r['step_memory_mb']:.1f}" if r.get("step_memory_mb") else ""
        lines.append(f"| {v} | {r['first_step_s']:.2f} | {s['median']:.2f} | {s['min']:.2f} | "
                     f"{s['max']:.2f} | {_ratio(med, v, 'jax_jit_step')} | "
                     f"{_ratio(med, v, 'jax_split')} | {r['peak_rss_mb']:.0f} | {memory} |")
    lines += ["", f"Losses of the first {COMPARE_STEPS} steps:"] + check_losses(results)
    return lines


def goals_table(all_results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The project's goals, per workload: ratios of medians and whether each holds."""
    lines = ["### Goals (ratios of median step times; step memory by XLA's analysis)", "",
             "| workload | " + " | ".join(f"{a} / {b} ({goal})" for a, b, _, goal, _ in GOALS)
             + " | xla / jax_jit_step step memory (<= 1.10) |",
             "| --- |" + " ---: |" * (len(GOALS) + 1)]
    for workload, results in all_results.items():
        med = {r["variant"]: summarize(r)["median"] for r in results}
        mem = {r["variant"]: r.get("step_memory_mb") for r in results}
        cells = []
        for a, b, limit, _, _ in GOALS:
            if a in med and b in med:
                ratio = med[a] / med[b]
                held = ratio < limit if limit == 1.0 else ratio <= limit
                cells.append(f"{ratio:.2f} {'ok' if held else 'MISSED'}")
            else:
                cells.append("n/a")
        if mem.get("xla") and mem.get("jax_jit_step"):
            ratio = mem["xla"] / mem["jax_jit_step"]
            cells.append(f"{ratio:.2f} {'ok' if ratio <= 1.10 else 'MISSED'}")
        else:
            cells.append("n/a")
        lines.append(f"| {workload} | " + " | ".join(cells) + " |")
    return lines


def chart(all_results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Median step time per variant (bars) with min-max whiskers, one panel per workload."""
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    families = {"eager": "#1f77b4", "partial": "#1f77b4", "xla": "#1f77b4",
                "jax": "#ff7f0e", "torch": "#2ca02c"}
    fig, axes = plt.subplots(1, len(all_results), figsize=(4.2 * len(all_results), 4.2),
                             squeeze=False)
    for ax, (workload, results) in zip(axes[0], all_results.items()):
        names = [r["variant"] for r in results]
        stats = [summarize(r) for r in results]
        med = np.array([s["median"] for s in stats])
        err = np.array([[m - s["min"] for m, s in zip(med, stats)],
                        [s["max"] - m for m, s in zip(med, stats)]])
        colors = [families.get(n.split("_")[0], "#7f7f7f") for n in names]
        ax.barh(names, med, xerr=err, color=colors, capsize=2)
        ax.set_xlim(left=0)
        ax.invert_yaxis()
        ax.set_title(workload)
        ax.set_xlabel("step time, ms (median; min-max)")
    fig.suptitle("this project (blue), pure jax (orange), PyTorch (green)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine() -> str:
    """A line describing where the run happened."""
    import jax

    device = jax.devices()[0]
    return (f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"jax {jax.__version__} on {device.platform} ({device.device_kind})")


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, measure, print and write the results."""
    parser = argparse.ArgumentParser(
        description="Every workload in every mode against pure-jax (and PyTorch) references.")
    parser.add_argument("--quick", action="store_true",
                        help="a short, less exact run: one process per workload, "
                             f"{QUICK_WARMUP}+{QUICK_TIMED} steps, cnn batch 16, no "
                             "torch.compile")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--variants", default="", help="comma-separated (default: all that apply)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                        help="folder for results.md, results.json, results.png")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, warmup, timed, batch, variants = args.child
        for variant in variants.split(","):
            print(json.dumps(run_one(workload, variant, int(warmup), int(timed),
                                     int(batch) or None)), flush=True)
        return

    started = time.time()
    command = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
    header = [f"Run {dt.date.today().isoformat()} on {machine()}.", "",
              f"Command: `{command.strip()}`" + (" (quick: not for quoting)" if args.quick
                                                 else ""), ""]
    if not torch_available():
        header += ["PyTorch is not importable here: its variants are skipped (it is never a "
                   "dependency; `pip install torch` to include them).", ""]
    print("\n".join(header))
    wanted = [v for v in args.variants.split(",") if v]
    all_results: dict[str, list[dict[str, Any]]] = {}
    report = list(header)
    for workload in args.workloads.split(","):
        variants = [v for v in available_variants(workload, args.quick)
                    if not wanted or v in wanted]
        results = measure_workload(workload, variants, args.quick)
        all_results[workload] = results
        lines = workload_table(workload, results)
        print("\n".join(lines) + "\n", flush=True)
        report += lines + [""]
    goals = goals_table(all_results)
    print("\n".join(goals))
    report += goals + ["", f"Total time {time.time() - started:.0f} s."]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text("\n".join(report) + "\n")
    (args.out / "results.json").write_text(json.dumps(
        {w: [{**r, "summary_ms": summarize(r)} for r in rs] for w, rs in all_results.items()},
        indent=1))
    chart(all_results, args.out / "results.png")
    print(f"\nwrote {args.out / 'results.md'}, results.json and results.png "
          f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
