"""MegEngine's model zoo trained here against torchvision in PyTorch eager, in one run.

Run `MEGENGINE_MODELS=../shared/megengine-models python -m benchmarks.zoo [--models ...]
[--steps N]`. Each (model, side, mode) trains in a fresh process (`benchmarks.zoo_models` says
what is trained, the same on both sides), which reports its first step's seconds, the median of
its next `--steps` steps, its losses, its peak resident memory and how long building the model
and optimizer took (here it compiles the initialisers' random draws, one program per shape).

This project's modes run with the persistent compilation cache on and empty (`cold`); eager and
the mode listed last (the documented best) then run again in new processes on the caches they
filled (`warm`, what a second run of a script sees: eager ops are compiled once per shape, and
a detector's first steps meet new shapes, so a cold median includes compiles a long run does
not pay). PyTorch (CPU, `ZOO_TORCH_THREADS` threads, 2 by
default) has no compile cache: its first step is the same either way. The table gives each
mode's ratio to PyTorch eager's median step and first step, and each mode's largest loss
difference from this project's eager run (the modes run the same code and must agree).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from .zoo_models import MODELS

# The modes of each model here, the last one the documented best (see docs/guide.md).
MODES = {"resnet18": ("eager", "step", "backbone"),
         "faster_rcnn": ("eager", "backbone", "breaks")}
ONE_STAGE = ("eager", "backbone", "head", "breaks")
LABELS = {"eager": "eager", "backbone": "backbone compiled", "head": "backbone + head compiled",
          "breaks": "forward with graph breaks", "step": "whole step (xla_trace)"}


def worker(side: str, name: str, mode: str, steps: int) -> dict:
    """Train `name` for 1 + `steps` steps in this process; its timings, losses and memory."""
    from .zoo_models import project_step, torch_step

    start = time.perf_counter()
    step = (project_step if side == "project" else torch_step)(name, mode)
    build = time.perf_counter() - start
    times, losses = [], []
    for _ in range(1 + steps):
        start = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - start)
    return {"build": build, "first": times[0], "median": statistics.median(times[1:]),
            "losses": losses, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run(side: str, name: str, mode: str, steps: int, cache: str | None) -> dict:
    """`worker` in a fresh process (its own peak memory, a first step that compiles)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PARTIAL_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    if cache is not None:
        env["PARTIAL_CACHE_DIR"] = cache
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.zoo", "--worker", side, name, mode, str(steps)],
        env=env, capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["(no output)"])[-1]}
    return json.loads(done.stdout.splitlines()[-1])


def label(name: str, mode: str) -> str:
    """How a mode is named in the table (ResNet-18's "backbone" mode compiles the model)."""
    return "model compiled" if (name, mode) == ("resnet18", "backbone") else LABELS[mode]


def rows_of(name: str, steps: int, with_torch: bool) -> list[tuple[str, str, dict]]:
    """(mode label, cache, result) of every run of `name`."""
    rows = []
    modes = MODES.get(name, ONE_STAGE)
    with tempfile.TemporaryDirectory() as root:
        for mode in modes:
            cache = os.path.join(root, mode)
            rows.append((label(name, mode), "cold", run("project", name, mode, steps, cache)))
        for mode in dict.fromkeys(("eager", modes[-1])):
            rows.append((label(name, mode), "warm",
                         run("project", name, mode, steps, os.path.join(root, mode))))
    if with_torch:
        rows.append(("PyTorch eager", "-", run("torch", name, "eager", steps, None)))
    return rows


def table(name: str, rows: list[tuple[str, str, dict]]) -> list[str]:
    """Markdown rows: each run with its ratios to PyTorch and its loss difference from eager."""
    torch = next((r for label, _, r in rows if label == "PyTorch eager" and "error" not in r), None)
    eager = rows[0][2]
    lines = []
    for label, cache, r in rows:
        if "error" in r:
            lines.append(f"| {name} | {label} | {cache} | failed: {r['error'][:80]} ||||||||")
            continue
        ratio = (f"{r['median'] / torch['median']:.2f}x" if torch else "-")
        first = (f"{r['first'] / torch['first']:.2f}x" if torch else "-")
        diff = ("-" if label == "PyTorch eager" or "losses" not in eager else
                f"{max(abs(a - b) for a, b in zip(r['losses'], eager['losses'])):.1e}")
        lines.append(f"| {name} | {label} | {cache} | {r['median']:.2f} | {ratio} | "
                     f"{r['first']:.1f} | {first} | {r['build']:.1f} | {r['peak_mb']:.0f} | "
                     f"{diff} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the first")
    parser.add_argument("--worker", nargs=4, metavar=("SIDE", "MODEL", "MODE", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        side, name, mode, steps = args.worker
        print(json.dumps(worker(side, name, mode, int(steps))))
        return
    with_torch = all(importlib.util.find_spec(m) for m in ("torch", "torchvision"))
    if not with_torch:
        print("torch and torchvision are not importable: PyTorch's rows are left out")
    print(f"| model | mode | cache | median step s | vs PyTorch | first step s | vs PyTorch "
          f"first | build s | peak MB | max loss diff from eager ({args.steps + 1} steps) |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.models:
        for line in table(name, rows_of(name, args.steps, with_torch)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
