"""One device count of `benchmarks.sharded`, in a process of its own (jax fixes its devices when
its backend starts; see that module for what is measured and why).

`python -m benchmarks.sharded_worker N [--modes ...] [--layouts ...] [--steps K]
[--sizes d=32,hidden=128] [--budget-mib B --widths 128,256,512]` makes N virtual CPU devices
(the first N real accelerators where jax has them), trains the GPT workload on a mesh of them
in each mode and layout, then, given a budget, searches the widest GPT whose whole xla_trace step
fits it. It prints one JSON object per line: a `row` per (mode, layout), a `search` per layout.
"""

from __future__ import annotations

import argparse
import contextlib
import functools as ft
import gc
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

import eager as eg
import eager.distributed as dist
from benchmarks import workloads

LAYOUTS = ("replicated", "stage1", "stage3")
MODES = ("eager", "partial", "xla")
QUANTUM = 16  # widths are multiples of heads (4) x the largest mesh (4): every split divides
WARMUP = 2
MiB = 2**20


@contextlib.contextmanager
def sized(sizes: dict[str, int] | None) -> Iterator[None]:
    """Within: the workload runners build a GPT of these sizes (`GPTBackbone`'s d, hidden,
    heads, blocks) instead of the canonical one. The runners call `build_model(name)`, so this
    binds the sizes there."""
    if not sizes:
        yield
        return
    original = workloads.build_model
    workloads.build_model = ft.partial(original, **sizes)
    try:
        yield
    finally:
        workloads.build_model = original


def width_sizes(d: int) -> dict[str, int]:
    """The GPT of width `d`: the workload's shape (hidden = 4 d, 4 heads, 2 blocks)."""
    return {"d": d, "hidden": 4 * d}


def build(mode: str, layout: str, mesh: Any, sizes: dict[str, int] | None = None) -> Any:
    """The GPT workload's runner of `mode`, its batch split over `mesh`, its model and Adam
    state laid out as `layout` says (replicated: data parallel; stageK: `dist.shard_params`)."""
    eg.random.seed(0)  # a resized GPT is drawn at random: the same draw for every layout
    with sized(sizes):
        runner = {"eager": workloads.EagerRunner, "partial": workloads.PartialRunner,
                  "xla": workloads.XlaRunner}[mode]("gpt")
    runner.x = dist.shard_batch(eg.read(runner.x), mesh)
    runner.y = dist.shard_batch(eg.read(runner.y), mesh)
    if layout == "replicated":
        dist.replicate(runner.model, mesh)
        dist.replicate(runner.opt, mesh)
    else:
        dist.shard_params([runner.model, runner.opt], mesh, stage=int(layout[-1]))
    return runner


def per_device_bytes(tensors: list) -> int:
    """The most bytes of `tensors` that one device holds (their shards on it)."""
    held: dict[int, int] = {}
    for t in tensors:
        for shard in eg.read(t).addressable_shards:
            held[shard.device.id] = held.get(shard.device.id, 0) + shard.data.nbytes
    return max(held.values())


def state_of(runner: Any) -> tuple[list, list]:
    """(parameters, optimizer-state tensors) of a runner."""
    return (runner.model.parameters(),
            [t for slots in runner.opt.state.values() for t in slots.values()])


def xla_memory(runner: Any, mode: str) -> dict[str, int] | None:
    """Per-device bytes by XLA's memory analysis (arguments, outputs, temporaries, aliased
    outputs and their peak, argument + output + temp - alias) of the whole compiled step (xla),
    or of the larger of the backbone segment's forward and backward executables (partial); None
    for eager, which runs op by op."""
    if mode == "eager":
        return None
    if mode == "xla":
        stats = [runner._step.segments()[-1].forward().memory_analysis()]
    else:
        entry = runner.backbone.entries()[-1]
        stats = [entry.memory_analysis(k) for k in ("forward_vjp", "backward")]
    worst = max(stats, key=workloads.peak_bytes)
    parts = {k: getattr(worst, f"{k}_size_in_bytes") for k in ("argument", "output", "temp",
                                                                  "alias")}
    return {**parts, "peak": workloads.peak_bytes(worst)}


def measure(mode: str, layout: str, mesh: Any, steps: int,
            sizes: dict[str, int] | None = None) -> dict:
    """One row: per-device bytes, XLA's peak, first-step and median step time, first loss, and
    whether every parameter and state tensor kept the layout it was placed in."""
    runner = build(mode, layout, mesh, sizes)
    params, state = state_of(runner)
    placed = [t.sharding for t in params + state]
    start_s = time.perf_counter()
    first = runner.float_loss(runner.step())
    first_s = time.perf_counter() - start_s
    times = []
    for i in range(WARMUP + steps if steps else 0):
        start_s = time.perf_counter()
        runner.sync(runner.step())
        if i >= WARMUP:
            times.append(time.perf_counter() - start_s)
    params, state = state_of(runner)
    row = {
        "kind": "row", "devices": mesh.devices.size, "mode": mode, "layout": layout,
        "param_bytes": per_device_bytes(params), "state_bytes": per_device_bytes(state),
        "xla": xla_memory(runner, mode), "first_step_s": first_s,
        "step_ms": statistics.median(times) * 1e3 if times else None, "steps": 1 + len(times),
        "first_loss": first,
        "layout_kept": all(t.sharding.is_equivalent_to(s, t.ndim)
                           for t, s in zip(params + state, placed)),
    }
    release(runner)
    return row


def release(runner: Any) -> None:
    """Drop a runner's compiled entries: its traced function's cache is shared by every runner
    of the same mode (same code), and would keep old executables, and their warnings, coming."""
    traced = getattr(runner, "_step", None) or getattr(runner, "backbone", None)
    if traced is not None and hasattr(traced, "cache_clear"):
        traced.cache_clear()
    gc.collect()


def step_peak(d: int, layout: str, mesh: Any) -> tuple[int, int]:
    """(XLA peak bytes per device of the xla_trace step, parameter count) of the GPT of width
    `d` laid out as `layout`; the step runs once (its first call captures and compiles it)."""
    runner = build("xla", layout, mesh, width_sizes(d))
    runner.sync(runner.step())
    peak = runner.step_memory()
    count = sum(p.size for p in runner.model.parameters())
    release(runner)
    return peak, count


def largest_width(budget: int, probe: Callable[[int], tuple[int, int]], widths: list[int],
                  known: dict[int, int] | None = None) -> dict:
    """The widest GPT (a multiple of `QUANTUM`) whose step's XLA peak fits `budget` bytes, where
    `probe(d)` gives (peak bytes, parameter count) of width d (`step_peak` on some layout).

    The peak is a quadratic in the width d (parameters, Adam state and gradients grow as d^2,
    activations as d, attention scores not at all), so it is measured at `widths` (`known`:
    peaks already measured), a parabola through them predicts the crossing, and probes at the
    predicted width and the next one confirm it (moving a step at a time while they disagree).

    >>> fake = lambda d: (3 * d * d + 1000 * d, 12 * d * d)
    >>> r = largest_width(10**6, fake, [64, 128, 256])
    >>> r["width"], r["peak_bytes"] <= 10**6 < r["next_peak_bytes"]
    (432, True)
    """
    probes: dict[int, tuple[int, int]] = {}

    def peak(d: int) -> int:
        if d not in probes:
            probes[d] = probe(d)
        return probes[d][0]

    points = {d: (known or {}).get(d) or peak(d) for d in widths}
    a, b, c = np.polyfit(list(points), list(points.values()), 2)
    roots = [r.real for r in np.roots([a, b, c - budget]) if abs(r.imag) < 1e-9 and r.real > 0]
    d = max(QUANTUM, int(min(roots, default=QUANTUM) // QUANTUM) * QUANTUM)
    for _ in range(8):  # normally two probes: d fits, d + QUANTUM does not
        if peak(d) > budget and d > QUANTUM:
            d -= QUANTUM
        elif peak(d + QUANTUM) <= budget:
            d += QUANTUM
        else:
            break
    return {"kind": "search", "budget": budget, "width": d, "params": probes[d][1],
            "peak_bytes": peak(d), "next_peak_bytes": peak(d + QUANTUM),
            "fit_points": {str(k): v for k, v in points.items()},
            "probes": {str(k): v[0] for k, v in sorted(probes.items())}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("devices", type=int)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--steps", type=int, default=5, help="timed steps (0: the first only)")
    parser.add_argument("--budget-mib", type=float, default=0.0, help="0: no width search")
    parser.add_argument("--widths", default="128,256,512", help="where the search fits")
    parser.add_argument("--search-layouts", default="stage3,replicated")
    parser.add_argument("--sizes", default="", help="a resized GPT for the rows: d=32,blocks=1")
    args = parser.parse_args(argv)
    sizes = {k: int(v) for k, v in (kv.split("=") for kv in args.sizes.split(",") if kv)}
    jax.config.update("jax_num_cpu_devices", args.devices)  # before anything computes
    devices = jax.devices()
    if len(devices) < args.devices:
        print(json.dumps({"kind": "skipped", "devices": args.devices,
                          "why": f"only {len(devices)} devices"}))
        return
    mesh = dist.mesh(devices[:args.devices])
    print(json.dumps({"kind": "machine", "devices": args.devices, "platform":
                      devices[0].platform, "device_kind": devices[0].device_kind,
                      "jax": jax.__version__}), flush=True)
    known: dict[str, dict[int, int]] = {}
    for mode in filter(None, args.modes.split(",")):
        for layout in args.layouts.split(","):
            row = measure(mode, layout, mesh, args.steps, sizes)
            if mode == "xla" and not sizes:  # the canonical GPT is the search's width 128
                known.setdefault(layout, {})[128] = row["xla"]["peak"]
            print(json.dumps(row), flush=True)
    if args.budget_mib:
        widths = [int(w) for w in args.widths.split(",")]
        found = {}
        for layout in args.search_layouts.split(","):
            found[layout] = largest_width(int(args.budget_mib * MiB),
                                          lambda d, lay=layout: step_peak(d, lay, mesh), widths,
                                          known.get(layout))
        cross_probe(found, lambda d, lay: step_peak(d, lay, mesh)[0])
        for layout, result in found.items():
            result.update(devices=args.devices, layout=layout)
            print(json.dumps(result), flush=True)


def cross_probe(found: dict[str, dict], probe: Callable[[int, str], int]) -> None:
    """Measure every searched layout (`found`: layout -> its `largest_width` result) at the
    widths the others reach too (`probe(d, layout)`: peak bytes), adding them to its probes, so
    the layouts' peaks compare at the same model: above all at the widest stage3 fits, the model
    sharding exists for, where parameters, gradients and Adam state, not activations, fill the
    step.

    >>> found = {"a": {"width": 32, "probes": {"16": 1, "32": 2}}, "b": {"width": 16,
    ...          "probes": {"16": 5}}}
    >>> cross_probe(found, lambda d, layout: d * 10)
    >>> found["b"]["probes"], found["a"]["probes"]
    ({'16': 5, '32': 320}, {'16': 1, '32': 2})
    """
    for layout, result in found.items():
        for other in found.values():
            d = str(other["width"])
            if d not in result["probes"]:
                result["probes"][d] = probe(int(d), layout)
        result["probes"] = dict(sorted(result["probes"].items(), key=lambda kv: int(kv[0])))


if __name__ == "__main__":
    main()
