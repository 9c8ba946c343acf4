"""Per-call overhead of a cached `partial_trace` segment against `jax.jit` on the same arrays.

Run `python -m benchmarks.partial_overhead [--quick]`. For a tiny two-layer model (4x4 weights:
the call is all dispatch and Python, the worst case for the ratio) and for each workload's
backbone (the spec's model and parameters, on a one-sample batch; on 2 CPU cores its arithmetic
still dominates) it times:

- inference, in eval mode: `backbone(x)` with no GradManager (flatten the arguments, check the
  guards, gather the lifted parameters and buffers, run the compiled forward, wrap the outputs)
  against `jax.jit(f)(*flat)`, where `f` is the same captured function and `flat` the same
  arrays (goal: ratio <= 1.5);
- training, in train mode, while a GradManager records: the forward that keeps residuals, one
  tape node, BatchNorm statistics written back (so each call waits for the previous one's
  statistics, which the reference, reusing its arrays, does not) against `jax.jit` of `jax.vjp`
  of `f` on the same arrays.

Calls are timed in batches from an idle device queue, which is drained after each batch, in
interleaved rounds; each ratio is the median of per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import eager as eg
import eager.module as M
from benchmarks.workloads import WORKLOADS, build_model
from eager.autodiff import GradManager
from partial import partial_trace

SMALL_INPUTS = {"mlp": (1, 784), "cnn": (1, 3, 8, 8), "gpt": (1, 8), "tiny": (2, 4)}


class _Tiny(M.Module):
    """Two 4x4 layers: arithmetic costs nothing, so the call is all dispatch and overhead."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = M.Sequential(M.Linear(4, 4), M.ReLU(), M.Linear(4, 4), M.ReLU())


def _input(name: str) -> eg.Tensor:
    shape = SMALL_INPUTS[name]
    if name == "gpt":
        return eg.tensor(np.arange(np.prod(shape), dtype=np.int32).reshape(shape) % 256)
    return eg.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


def time_batch(fn: Callable[[], Any], number: int, drain: Callable[[], Any]) -> float:
    """Mean seconds per call over `number` calls started from, and drained to, an idle queue."""
    jax.block_until_ready(drain())
    start = time.perf_counter()
    for _ in range(number):
        fn()
    elapsed = time.perf_counter() - start
    jax.block_until_ready(drain())
    return elapsed / number


def measure(name: str, number: int, rounds: int) -> dict[str, float]:
    """Medians (microseconds) and median ratios for one workload's backbone."""
    model = _Tiny() if name == "tiny" else build_model(name)
    backbone = partial_trace(model.backbone)
    x = _input(name)
    refs = {}
    for training in (False, True):  # eval: no statistics written, so calls are independent
        model.train(training)
        backbone(x)
        flat = backbone.flat_inputs(x)
        pure = backbone.segments()[-1].fn
        refs[training] = flat, (jax.jit(lambda *a, f=pure: jax.vjp(
            lambda *p: f(a[0], *p), *a[1:])) if training else jax.jit(pure))
    gm = GradManager().attach(model.parameters())
    drain = model.backbone.parameters()[0]

    def timed(fn: Callable[[], Any], training: bool, recording: bool) -> float:
        model.train(training)
        if recording:
            gm.record()
        try:
            return time_batch(fn, number, lambda: eg.read(drain))
        finally:
            gm.release()

    (flat, ref), (flat_t, ref_t) = refs[False], refs[True]
    calls = {"partial": (lambda: backbone(x), False, False),
             "jit": (lambda: ref(*flat), False, False),
             "partial_train": (lambda: backbone(x), True, True),
             "jit_train": (lambda: ref_t(*flat_t), True, False)}
    for call in calls.values():
        timed(*call)
    rows = [{k: timed(*call) for k, call in calls.items()} for _ in range(rounds)]
    out = {k: statistics.median(r[k] for r in rows) * 1e6 for k in calls}
    out["ratio"] = statistics.median(r["partial"] / r["jit"] for r in rows)
    out["ratio_train"] = statistics.median(r["partial_train"] / r["jit_train"] for r in rows)
    out["inputs"] = len(flat)
    return out


def main(argv: list[str] | None = None) -> None:
    """Measure every workload and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    number, rounds = (100, 5) if args.quick else (300, 15)
    print(f"## Cached segment call vs jax.jit on the same arrays (one-sample batches; medians of "
          f"{rounds} interleaved rounds of {number} calls)\n")
    print("| backbone | inputs | partial µs | jax.jit µs | ratio (goal <= 1.5) | "
          "partial, recording µs | jit vjp µs | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ("tiny", *WORKLOADS):
        r = measure(name, number, rounds)
        print(f"| {name} | {r['inputs']} | {r['partial']:.1f} | {r['jit']:.1f} | "
              f"{r['ratio']:.2f} | {r['partial_train']:.1f} | {r['jit_train']:.1f} | "
              f"{r['ratio_train']:.2f} |")


if __name__ == "__main__":
    main()
