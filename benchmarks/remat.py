"""Rematerialization on the training step: memory kept and step time per `partial_trace(remat=)`.

Run `python -m benchmarks.remat [--workloads mlp,cnn,gpt] [--steps N] [--quick]`.

For each workload and each remat value (False, True, "dots") a fresh process builds the `partial`
variant of `benchmarks.workloads` (the backbone under `partial_trace(remat=...)`; head, loss,
backward pass and optimizer eager), runs the warmup steps untimed (mlp 10, cnn 5, gpt 5) and times
each of N steps (mlp 100, cnn 30, gpt 50 unless `--steps`) with `time.perf_counter` around step and
sync. Reported per configuration, with ratios against remat=False:

- *median ms*: the median step time;
- *residual MiB*: `fn.entries()[0].residual_bytes`, what the training forward keeps for the
  backward;
- *XLA peak MiB*: XLA's memory analysis of the backbone's two training executables,
  max(forward_vjp output + temp, backward argument + output + temp): what the compiled backbone
  holds beyond its inputs (parameters and batch, live anyway), i.e. the forward's residuals and
  features with its scratch, then the residuals (still held) with the backward's scratch and
  gradients;
- *peak RSS MB*: the process's peak resident memory (`VmHWM`, as the suite reports it; it
  includes jax's import footprint and compilation);
- *compile s*: capture and compilation of the backbone's entry.

The losses of the first steps of every configuration must agree with remat=False's (remat does not
change values), else the row is marked MISMATCH. `--quick` (a smoke run, not for quoting): 1
warmup and 3 timed steps, cnn batch 16.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from typing import Any

import numpy as np

from benchmarks.suite import child, machine, peak_rss_mb, time_steps

REMATS: tuple[bool | str, ...] = (False, True, "dots")
WORKLOADS = ("mlp", "cnn", "gpt")
QUICK_WARMUP, QUICK_TIMED = 1, 3
QUICK_BATCH = {"cnn": 16}
COMPARE_STEPS = 5
LOSS_RTOL = 1e-4
MiB = 2**20


def parse_remat(text: str) -> bool | str:
    """"False" / "True" / "dots" (the command-line spelling) -> the `remat` option."""
    return {"False": False, "True": True}.get(text, text)


def _analysis(info: Any, kind: str) -> dict[str, float]:
    stats = info.memory_analysis(kind)
    return {k: getattr(stats, f"{k}_size_in_bytes") / MiB for k in ("argument", "output", "temp")}


def run_one(workload: str, remat: bool | str, warmup: int, timed: int,
            batch: int | None) -> dict[str, Any]:
    """Measure one configuration in this process; times in seconds, sizes in MiB."""
    from benchmarks.workloads import partial_step

    runner = partial_step(workload, batch, remat=remat)
    _, times, losses = time_steps(runner, warmup, timed)
    entries = runner.backbone.entries()
    info = entries[-1]
    return {
        "workload": workload, "remat": remat, "times_s": times, "entries": len(entries),
        "losses": [runner.float_loss(x) for x in losses],
        "residual_mib": info.residual_bytes / MiB, "compile_s": info.compile_seconds,
        "forward_vjp": _analysis(info, "forward_vjp"), "backward": _analysis(info, "backward"),
        "peak_rss_mb": peak_rss_mb(),
    }


def xla_peak_mib(result: dict[str, Any]) -> float:
    """max(forward_vjp output + temp, backward argument + output + temp), in MiB."""
    fwd, bwd = result["forward_vjp"], result["backward"]
    return max(fwd["output"] + fwd["temp"], bwd["argument"] + bwd["output"] + bwd["temp"])


def _child(workload: str, remat: bool | str, warmup: int, timed: int,
           batch: int | None) -> dict[str, Any]:
    """Run one configuration in `python -m benchmarks.remat --child ...`; its JSON result."""
    args = [workload, str(remat), str(warmup), str(timed), str(batch or 0)]
    return child("benchmarks.remat", args)[-1]


def _cell(value: float, base: float, digits: int = 1) -> tuple[str, str]:
    return f"{value:.{digits}f}", (f"{value / base:.2f}" if base else "n/a")


def table(results: list[dict[str, Any]]) -> list[str]:
    """The markdown table of every configuration, ratios against its workload's remat=False."""
    lines = ["| workload | remat | median ms | / False | residual MiB | / False | XLA peak MiB "
             "| / False | peak RSS MB | / False | compile s | losses |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    base: dict[str, dict[str, Any]] = {}
    for r in results:
        base.setdefault(r["workload"], r)
        b = base[r["workload"]]
        ms, b_ms = (float(np.median(x["times_s"])) * 1e3 for x in (r, b))
        n = min(COMPARE_STEPS, len(r["losses"]), len(b["losses"]))
        got, want = np.asarray(r["losses"][:n]), np.asarray(b["losses"][:n])
        rel = float(np.max(np.abs(got - want) / np.abs(want)))
        check = f"{'ok' if rel <= LOSS_RTOL else 'MISMATCH'} ({rel:.0e})"
        if r["entries"] != 1:
            check += f", {r['entries']} entries"
        cells = [*_cell(ms, b_ms, 2), *_cell(r["residual_mib"], b["residual_mib"]),
                 *_cell(xla_peak_mib(r), xla_peak_mib(b)),
                 *_cell(r["peak_rss_mb"], b["peak_rss_mb"], 0), f"{r['compile_s']:.2f}", check]
        lines.append(f"| {r['workload']} | {r['remat']} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--steps", type=int, default=0,
                        help="timed steps per configuration (default: the spec's, per workload)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: {QUICK_WARMUP}+{QUICK_TIMED} steps, cnn batch 16")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, remat, warmup, timed, batch = args.child
        result = run_one(workload, parse_remat(remat), int(warmup), int(timed), int(batch) or None)
        print(json.dumps(result), flush=True)
        return

    from benchmarks.workloads import TIMED_STEPS, WARMUP_STEPS

    started = time.time()
    command = "python -m benchmarks.remat " + " ".join(argv if argv is not None
                                                      else sys.argv[1:])
    print(f"Run {dt.date.today().isoformat()} on {machine()}.\n\nCommand: `{command.strip()}`"
          + (" (quick: not for quoting)" if args.quick else "") + "\n", flush=True)
    results = []
    for workload in args.workloads.split(","):
        warmup = QUICK_WARMUP if args.quick else WARMUP_STEPS[workload]
        timed = args.steps or (QUICK_TIMED if args.quick else TIMED_STEPS[workload])
        batch = QUICK_BATCH.get(workload) if args.quick else None
        for remat in REMATS:
            results.append(_child(workload, remat, warmup, timed, batch))
    print("\n".join(table(results)))
    print(f"\nXLA peak = max(forward_vjp output + temp, backward argument + output + temp); "
          f"losses: first {COMPARE_STEPS} steps vs remat=False (max rel. diff.). "
          f"Total {time.time() - started:.0f} s.")


if __name__ == "__main__":
    main()
