"""Per-call cost of a graph break: the same backbone region with one `exclude_from_trace()`
block in the middle, without it, and run eagerly.

Run `python -m benchmarks.breaks [--quick]`. For the MLP and the CNN of the workloads (the spec's
models) the backbone is split in two halves (mlp: fc1+ReLU | fc2+ReLU; cnn: stem+layer1 |
layer2+pool) and timed three ways:

- `none`: `partial_trace(lambda x: second(first(x)))`, a region without breaks: a cached call
  runs no Python of the region, one compiled segment;
- `break`: the same with an empty `with exclude_from_trace(): pass` between the halves: every
  call re-runs the region's Python, records its ops lazily, and runs two cached segments;
- `eager`: `second(first(x))` op by op.

Each is timed for inference (eval mode, no GradManager) and for training (train mode: forward
under a recording GradManager, then `gm.backward` of the output's sum), on a one-sample batch
(the call is mostly Python: the worst case for a break) and on a larger one. Calls are timed in
batches drained to an idle device queue, in interleaved rounds; the table gives medians and
the median of per-round ratios, and the added cost of the break per call and per recorded op.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

import eager as eg
import eager.functional as F
from benchmarks.partial_overhead import time_batch
from benchmarks.workloads import build_model
from eager.autodiff import GradManager
from partial import exclude_from_trace, partial_trace

BATCHES = {"mlp": (1, 128), "cnn": (1, 16)}
INPUT = {"mlp": (784,), "cnn": (3, 32, 32)}


def halves(name: str, backbone: Any) -> tuple[Callable, Callable]:
    """The backbone as two functions whose composition is its forward."""
    if name == "mlp":
        return (lambda x: F.relu(backbone.fc1(x)),
                lambda h: F.relu(backbone.fc2(h)))
    return (lambda x: backbone.layer1(F.relu(backbone.stem(x))),
            lambda h: backbone.layer2(h).mean(axis=(2, 3)))


def variants(name: str, backbone: Any) -> dict[str, Callable]:
    first, second = halves(name, backbone)

    def with_break(x: eg.Tensor) -> eg.Tensor:
        h = first(x)
        with exclude_from_trace():
            pass
        return second(h)

    return {"none": partial_trace(lambda x: second(first(x))),
            "break": partial_trace(with_break),
            "eager": lambda x: second(first(x))}


def measure(name: str, batch: int, number: int, rounds: int) -> dict[str, Any]:
    """Medians (µs per call) and median ratios for one model and batch size."""
    model = build_model(name)
    fns = variants(name, model.backbone)
    x = eg.tensor(np.random.default_rng(0).standard_normal(
        (batch, *INPUT[name])).astype(np.float32))
    gm = GradManager().attach(model.parameters())
    drain = model.backbone.parameters()[0]

    def infer(fn: Callable) -> Callable[[], Any]:
        return lambda: fn(x)

    def train(fn: Callable) -> Callable[[], Any]:
        def call() -> None:
            with gm:
                gm.backward(fn(x).sum())
            for p in model.parameters():
                p.grad = None
        return call

    def timed(fn: Callable[[], Any], training: bool) -> float:
        model.train(training)
        return time_batch(fn, number, lambda: eg.read(drain))

    calls = {(k, mode): (make(fn), mode == "train")
             for k, fn in fns.items() for mode, make in (("infer", infer), ("train", train))}
    for call in calls.values():  # compile and warm up
        timed(*call)
    rows = [{k: timed(*call) for k, call in calls.items()} for _ in range(rounds)]
    out: dict[str, Any] = {k: statistics.median(r[k] for r in rows) * 1e6 for k in calls}
    for mode in ("infer", "train"):
        for ref in ("none", "eager"):
            out[("ratio", mode, ref)] = statistics.median(
                r[("break", mode)] / r[(ref, mode)] for r in rows)
    fns["break"](x)
    out["ops"] = fns["break"].cache_info().ops
    return out


def main(argv: list[str] | None = None) -> None:
    """Measure both models at both batch sizes and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    number, rounds = (20, 5) if args.quick else (50, 11)
    print(f"## One graph break against none and against eager (µs per call; medians of "
          f"{rounds} interleaved rounds of {number} calls)\n")
    print("| model | batch | mode | eager | no break | one break | break / none | "
          "break / eager | added by the break | per recorded op |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ("mlp", "cnn"):
        for batch in BATCHES[name]:
            r = measure(name, batch, number, rounds)
            for mode in ("infer", "train"):
                added = r[("break", mode)] - r[("none", mode)]
                print(f"| {name} | {batch} | {mode} | {r[('eager', mode)]:.0f} | "
                      f"{r[('none', mode)]:.0f} | {r[('break', mode)]:.0f} | "
                      f"{r[('ratio', mode, 'none')]:.2f} | {r[('ratio', mode, 'eager')]:.2f} | "
                      f"{added:.0f} | {added / r['ops']:.1f} |")


if __name__ == "__main__":
    main()
