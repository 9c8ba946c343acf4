"""Training-step times of the three benchmark workloads: `eager` and `partial_trace` against
pure-jax baselines.

Run `python -m benchmarks.training_steps [--quick] [--workloads mlp,cnn,gpt]
[--variants eager,partial,xla,jax_eager,jax_jit_step,jax_split] [--json PATH]`.

Follows the measurement protocol of `shared/reference/workloads.md`: each (workload, variant) runs
in a fresh process, which builds the model, loads the canonical init and moves the batch to the
device untimed, then times the first step alone (compilation included), runs the warmup steps
(mlp 10, cnn 5, gpt 5) and times each of the timed steps (mlp 100, cnn 30, gpt 50) with
`time.perf_counter` around step + sync. `--quick` uses 2 warmup and 10 timed steps. The variants are
described in `benchmarks.workloads`. The script checks that every variant's losses agree with the
first one's over the first steps and prints markdown tables with the ratios of medians:
eager / jax_eager (goal < 1), partial / jax_split (goal <= 1.10), xla / jax_jit_step (goal
<= 1.05), and for xla_trace against the jitted pure-jax step the first-call (capture and
compile) times and the step's peak memory by XLA's analysis (goal <= 1.10) beside the processes'
peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VARIANTS = ("eager", "partial", "xla", "jax_eager", "jax_jit_step", "jax_split")
QUICK_WARMUP, QUICK_TIMED = 2, 10
COMPARE_STEPS = 5  # losses of the first steps every variant must agree on
LOSS_RTOL = 1e-4


def run_one(workload: str, variant: str, warmup: int, timed: int) -> dict[str, Any]:
    """Measure one (workload, variant) in this process; returns times (seconds) and losses."""
    from benchmarks.workloads import VARIANTS

    runner = VARIANTS[variant](workload)
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
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    step_bytes = runner.step_memory()
    return {
        "workload": workload, "variant": variant, "first_step_s": first, "times_s": times,
        "losses": [runner.float_loss(x) for x in losses], "peak_rss_mb": peak_rss,
        "step_memory_mb": None if step_bytes is None else step_bytes / 2**20,
    }


def run_fresh(workload: str, variant: str, warmup: int, timed: int) -> dict[str, Any]:
    """`run_one` in a fresh Python process (cold jit caches), as the protocol asks."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "benchmarks.training_steps", "--child", workload, variant,
           str(warmup), str(timed)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{workload}/{variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize(result: dict[str, Any]) -> dict[str, float]:
    """Median, min, max, mean, p10 and p90 of the timed steps (milliseconds)."""
    ms = np.asarray(result["times_s"]) * 1e3
    return {"median": float(np.median(ms)), "min": float(ms.min()), "max": float(ms.max()),
            "mean": float(ms.mean()), "p10": float(np.percentile(ms, 10)),
            "p90": float(np.percentile(ms, 90))}


def loss_report(results: list[dict[str, Any]]) -> list[str]:
    """Lines comparing each variant's first losses with the first variant's."""
    ref = results[0]
    n = min(COMPARE_STEPS, *(len(r["losses"]) for r in results))
    lines = []
    for r in results:
        a, b = np.asarray(r["losses"][:n]), np.asarray(ref["losses"][:n])
        rel = float(np.max(np.abs(a - b) / np.abs(b)))
        verdict = "ok" if rel <= LOSS_RTOL else "MISMATCH"
        shown = ", ".join(f"{v:.6f}" for v in r["losses"][:n])
        lines.append(f"- {r['variant']}: [{shown}] max rel diff vs {ref['variant']} "
                     f"{rel:.1e} ({verdict})")
    return lines


def _loss_after(losses: list[float], updates: int = 20) -> str:
    return f"{losses[updates]:.4f}" if len(losses) > updates else f"{losses[-1]:.4f} (last)"


def print_workload(workload: str, results: list[dict[str, Any]]) -> None:
    """Print the markdown table and the loss check of one workload."""
    stats = {r["variant"]: summarize(r) for r in results}
    eager = stats.get("eager")
    n_timed = len(results[0]["times_s"])
    print(f"\n### {workload} ({n_timed} timed steps)\n")
    print("| variant | first step s | median ms | min ms | max ms | eager / this (median) | "
          "loss step 1 | loss after 20 | peak RSS MB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        s = stats[r["variant"]]
        ratio = f"{eager['median'] / s['median']:.2f}" if eager else "n/a"
        print(f"| {r['variant']} | {r['first_step_s']:.2f} | {s['median']:.2f} | "
              f"{s['min']:.2f} | {s['max']:.2f} | {ratio} | {r['losses'][0]:.4f} | "
              f"{_loss_after(r['losses'])} | {r['peak_rss_mb']:.0f} |")
    print(f"\nLosses of the first {COMPARE_STEPS} steps:")
    print("\n".join(loss_report(results)))


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, run every (workload, variant) in a fresh process, print tables."""
    from benchmarks.workloads import TIMED_STEPS, WARMUP_STEPS, WORKLOADS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_WARMUP} warmup and {QUICK_TIMED} timed steps")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--json", type=Path, help="also write every result to this JSON file")
    parser.add_argument("--child", nargs=4, metavar=("WORKLOAD", "VARIANT", "WARMUP", "TIMED"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, variant, warmup, timed = args.child
        print(json.dumps(run_one(workload, variant, int(warmup), int(timed))))
        return

    variants = args.variants.split(",")
    all_results = []
    summary = []
    first_steps: dict[str, dict[str, float]] = {}
    peaks: dict[str, dict[str, float]] = {}
    memory: dict[str, dict[str, float | None]] = {}
    for workload in args.workloads.split(","):
        warmup = QUICK_WARMUP if args.quick else WARMUP_STEPS[workload]
        timed = QUICK_TIMED if args.quick else TIMED_STEPS[workload]
        results = [run_fresh(workload, v, warmup, timed) for v in variants]
        print_workload(workload, results)
        all_results += results
        summary.append((workload, {r["variant"]: statistics.median(r["times_s"])
                                    for r in results}))
        first_steps[workload] = {r["variant"]: r["first_step_s"] for r in results}
        peaks[workload] = {r["variant"]: r["peak_rss_mb"] for r in results}
        memory[workload] = {r["variant"]: r["step_memory_mb"] for r in results}
    if summary:
        print("\n### Summary (ratios of median step times)\n")
        pairs = [("eager", "jax_eager", "goal < 1"), ("partial", "jax_split", "goal <= 1.10"),
                 ("xla", "jax_jit_step", "goal <= 1.05"), ("eager", "jax_jit_step", ""),
                 ("partial", "jax_jit_step", "")]
        heads = [f"{a} / {b}" + (f" ({goal})" if goal else "") for a, b, goal in pairs]
        print("| workload | eager ms | partial ms | xla ms | " + " | ".join(heads) + " |")
        print("| --- | ---: | ---: | ---: |" + " ---: |" * len(pairs))
        for workload, med in summary:
            cells = [f"{med[a] / med[b]:.2f}" if a in med and b in med else "n/a"
                     for a, b, _ in pairs]
            ms = [f"{med[v] * 1e3:.2f}" if v in med else "n/a"
                  for v in ("eager", "partial", "xla")]
            print(f"| {workload} | " + " | ".join(ms) + " | " + " | ".join(cells) + " |")
        if all(v in firsts for firsts in first_steps.values() for v in ("xla", "jax_jit_step")):
            print("\n### xla_trace against the jitted pure-jax step\n")
            print("Step memory is XLA's analysis of the whole-step executable (arguments + "
                  "outputs + temporaries - donated aliases); peak RSS is the process's, which "
                  "also holds the eager model's construction (its per-op kernels).\n")
            print("| workload | first call s: xla / jax.jit | step memory MB: xla / jax.jit | "
                  "ratio (goal <= 1.10) | peak RSS MB: xla / jax.jit | ratio |")
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            for workload, firsts in first_steps.items():
                rss, mem = peaks[workload], memory[workload]
                mem_cells = (f"{mem['xla']:.1f} / {mem['jax_jit_step']:.1f} | "
                             f"{mem['xla'] / mem['jax_jit_step']:.2f}"
                             if mem.get("xla") and mem.get("jax_jit_step") else "n/a | n/a")
                print(f"| {workload} | {firsts['xla']:.2f} / {firsts['jax_jit_step']:.2f} | "
                      f"{mem_cells} | {rss['xla']:.0f} / {rss['jax_jit_step']:.0f} | "
                      f"{rss['xla'] / rss['jax_jit_step']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(
            [{**r, "summary_ms": summarize(r)} for r in all_results], indent=1))


if __name__ == "__main__":
    main()
