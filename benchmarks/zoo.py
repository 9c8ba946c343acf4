"""MegEngine's model zoo trained here against torchvision in PyTorch, in one run.

Run `MEGENGINE_MODELS=../shared/megengine-models python -m benchmarks.zoo [--models ...]
[--steps N] [--json PATH]`. Each run below is a fresh process (`benchmarks.zoo_models` says
what is trained, the same on both sides), which reports its first step's seconds, the median of
its next `--steps` steps, its losses, its peak resident memory and how long building the model
and optimizer took (here it compiles the initialisers' random draws, one program per shape).

The persistent compilation cache is on by default (with `PARTIAL_CACHE_DIR` unset a process
uses a per-user directory), so every run here is given a directory of its own under a
temporary folder, or the cache turned off: the benchmark never reads or fills the user's cache.
Per model:

- each of this project's modes (`MODES` / `ONE_STAGE`, the last the documented best) runs
  "cold", on an empty cache directory, then "warm", in a second process on the directory the
  first filled (what a second run of a script sees);
- the best mode runs cold once more pinned to one core (`taskset -c 0`, or
  `os.sched_setaffinity`; skipped with a note where only one core is available), and once with
  the cache off (`PARTIAL_CACHE_DIR=` empty) and serial compiles (`PARTIAL_COMPILE_THREADS=1`);
- PyTorch eager (CPU, `ZOO_TORCH_THREADS` threads, 2 by default; it has no compile cache), and
  `torch.compile` (default mode) of the torchvision model's backbone (ResNet-18: the model) on
  an empty inductor cache (`TORCHINDUCTOR_CACHE_DIR`); a failing compile is a row saying why.

Columns: the first step, cold on every core the benchmark may use, cold on one core, and warm;
its ratio to PyTorch eager's first step (cold / warm); the median later step of the cold and
the warm process (a detector's first steps meet new shapes, so a cold median includes compiles
a long run does not pay) and its ratio to PyTorch eager's median; build seconds; peak resident
MB; the largest loss difference of the row's runs from this project's eager cold run (the modes
run the same code and must agree, to float rounding); and the exactness check of the best mode:
"== cold, == warm" when the losses with the cache off and serial compiles equal both runs' bit
for bit (float ==), else the largest difference (the cache and parallel compiles must not change
what is computed). `--json PATH` writes every process's raw results as well.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from . import zoo_table
from .zoo_models import MODELS

# The modes of each model here, the last one the documented best (see docs/guide.md).
MODES = {"resnet18": ("eager", "step", "backbone"),
         "faster_rcnn": ("eager", "backbone", "breaks")}
ONE_STAGE = ("eager", "backbone", "head", "breaks")
LABELS = {"eager": "eager", "backbone": "backbone compiled", "head": "backbone + head compiled",
          "breaks": "forward with graph breaks", "step": "whole step (xla_trace)"}
# Never inherited by a child: the caches, their size bound and the compile threads are the
# benchmark's to set (defaults unless it sets them).
NOT_INHERITED = ("PARTIAL_CACHE_DIR", "PARTIAL_CACHE_MAX_SIZE", "JAX_COMPILATION_CACHE_DIR",
                 "PARTIAL_COMPILE_THREADS", "TORCHINDUCTOR_CACHE_DIR")


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


def run(side: str, name: str, mode: str, steps: int, cache: str | None,
        env: dict[str, str] | None = None, cpu: int | None = None) -> dict:
    """`worker` in a fresh process (its own peak memory, a first step that compiles).

    `cache`: its persistent cache directory; None or "" turns the cache off (it is on by
    default, in the user's directory, which a benchmark must not touch). `env`: more
    environment. `cpu`: the one core to pin the process to.
    """
    child = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    child["PARTIAL_CACHE_DIR"] = cache or ""
    child.update(env or {})
    command = [sys.executable, "-m", "benchmarks.zoo", "--worker", side, name, mode, str(steps)]
    pin = None
    if cpu is not None and shutil.which("taskset"):
        command = ["taskset", "-c", str(cpu), *command]
    elif cpu is not None:
        def pin() -> None:
            os.sched_setaffinity(0, {cpu})
    done = subprocess.run(command, env=child, capture_output=True, text=True, preexec_fn=pin)
    out = done.stdout.strip().splitlines()
    if done.returncode or not out:
        return {"error": (done.stderr.strip().splitlines() or ["(no output)"])[-1],
                "returncode": done.returncode}
    return json.loads(out[-1])


def guarded_worker(side: str, name: str, mode: str, steps: int) -> dict:
    """`worker`, an exception reported as `{"error": ...}` (why torch.compile failed, say)."""
    try:
        return worker(side, name, mode, steps)
    except Exception as e:  # noqa: BLE001 - any failure is a result to tabulate
        traceback.print_exc()
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return {"error": f"{type(e).__name__}: {' '.join(lines[:3])}"[:400],
                "traceback": traceback.format_exc()[-4000:]}


def label(name: str, mode: str) -> str:
    """How a mode is named in the table (ResNet-18's "backbone" mode compiles the model)."""
    return "model compiled" if (name, mode) == ("resnet18", "backbone") else LABELS[mode]


def cores() -> list[int]:
    """The cores this process may run on (its affinity, where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def one_core(name: str, mode: str, steps: int, cache: str, available: list[int]) -> dict:
    """`mode`'s cold run pinned to the first available core, or why it is skipped."""
    if len(available) < 2:
        return {"skipped": "1 core available: the cold run is already on 1 core"}
    if not (shutil.which("taskset") or hasattr(os, "sched_setaffinity")):
        return {"skipped": "neither taskset nor os.sched_setaffinity here"}
    return run("project", name, mode, steps, cache, cpu=available[0])


def measure(name: str, steps: int, with_torch: bool, available: list[int]) -> dict[str, Any]:
    """Every run of model `name` (see the module's docstring), in a temporary folder of caches."""
    modes = MODES.get(name, ONE_STAGE)
    best = modes[-1]
    out: dict[str, Any] = {"best": best, "torch": {}, "modes": {m: {} for m in modes}}
    with tempfile.TemporaryDirectory(prefix="zoo-") as root:
        if with_torch:
            _log(name, "PyTorch eager, torch.compile")
            out["torch"]["eager"] = run("torch", name, "eager", steps, None)
            inductor = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor")}
            out["torch"]["compile"] = run("torch", name, "compile", steps, None, env=inductor)
        for kind in ("cold", "warm"):
            _log(name, f"{kind}: {', '.join(modes)}")
            for mode in modes:
                out["modes"][mode][kind] = run("project", name, mode, steps,
                                               os.path.join(root, mode))
        _log(name, f"{best}: cold on 1 core, cache off with serial compiles")
        out["one_core"] = one_core(name, best, steps, os.path.join(root, "one-core"), available)
        out["exact"] = run("project", name, best, steps, "",
                           env={"PARTIAL_COMPILE_THREADS": "1"})
    return out


def _log(name: str, what: str) -> None:
    """Progress on stderr (a full run takes tens of minutes)."""
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {what}", file=sys.stderr, flush=True)


def meta(steps: int, available: list[int]) -> dict[str, Any]:
    """What the JSON records besides the results: settings, machine, versions."""
    versions = {}
    for package in ("jax", "jaxlib", "torch", "torchvision"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "steps": steps,
            "cores": available, "torch_threads": int(os.environ.get("ZOO_TORCH_THREADS", "2")),
            "python": sys.version.split()[0], "versions": versions}


def main(argv: list[str] | None = None) -> None:
    """The table of every model in `--models`; `--json PATH` also writes the raw results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the first")
    parser.add_argument("--json", metavar="PATH", help="also write all raw results to PATH")
    parser.add_argument("--worker", nargs=4, metavar=("SIDE", "MODEL", "MODE", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        side, name, mode, steps = args.worker
        print(json.dumps(guarded_worker(side, name, mode, int(steps))))
        return
    with_torch = all(importlib.util.find_spec(m) for m in ("torch", "torchvision"))
    if not with_torch:
        print("torch and torchvision are not importable: PyTorch's rows are left out")
    available = cores()
    info, results = meta(args.steps, available), {}
    print("\n".join(zoo_table.header(len(available), args.steps)), flush=True)
    for name in args.models:
        results[name] = measure(name, args.steps, with_torch, available)
        labels = {mode: label(name, mode) for mode in results[name]["modes"]}
        for line in zoo_table.rows(name, results[name], labels):
            print(line, flush=True)
        if args.json:
            zoo_table.write_json(args.json, info, results)


if __name__ == "__main__":
    main()
