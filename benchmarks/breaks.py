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
(the call is mostly Python: the worst case for a break) and on a larger one. Two times per call:

- host: from the call until it returns. jax dispatches asynchronously, so this is the Python
  and dispatch work of the call (re-running the region, recording its ops, looking up and
  launching the segments), the overhead a break adds;
- latency: until its results exist (the output; in training the gradients), computation
  included. Each call starts from an idle device.

Variants alternate in interleaved rounds; the table gives medians over rounds, the median of
per-round ratios, and the host time the break adds per call and per recorded op.
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
import eager.functional as F
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
    params = model.backbone.parameters()
    gm = GradManager().attach(params)

    def infer(fn: Callable) -> Callable[[], Any]:
        return lambda: eg.read(fn(x))

    def train(fn: Callable) -> Callable[[], Any]:
        def call() -> list:
            with gm:
                gm.backward(fn(x).sum())
            grads = [eg.read(p.grad) for p in params]
            for p in params:
                p.grad = None
            return grads
        return call

    def timed(fn: Callable[[], Any], training: bool) -> tuple[float, float]:
        """Mean host and latency seconds per call."""
        model.train(training)
        host = total = 0.0
        for _ in range(number):
            start = time.perf_counter()
            out = fn()
            returned = time.perf_counter()
            jax.block_until_ready(out)
            host += returned - start
            total += time.perf_counter() - start
        return host / number, total / number

    calls = {(k, mode): (make(fn), mode == "train")
             for k, fn in fns.items() for mode, make in (("infer", infer), ("train", train))}
    for call in calls.values():  # compile and warm up
        timed(*call)
    rows = [{k: timed(*call) for k, call in calls.items()} for _ in range(rounds)]
    model.train(False)
    fns["break"](x)
    return {**summarize(rows), "ops": fns["break"].cache_info().ops}


def summarize(rows: list[dict]) -> dict[Any, float]:
    """Medians in µs by (host or latency, variant, mode), and the median per-round ratios of
    the break variant to the others by ("ratio", host or latency, mode, other variant)."""
    out: dict[Any, float] = {}
    for j, what in enumerate(("host", "latency")):
        for k in rows[0]:
            out[(what, *k)] = statistics.median(r[k][j] for r in rows) * 1e6
        for mode in ("infer", "train"):
            for ref in ("none", "eager"):
                out[("ratio", what, mode, ref)] = statistics.median(
                    r[("break", mode)][j] / r[(ref, mode)][j] for r in rows)
    return out


def main(argv: list[str] | None = None) -> None:
    """Measure both models at both batch sizes and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    number, rounds = (20, 5) if args.quick else (50, 11)
    print(f"## One graph break against none and against eager (µs per call; medians of "
          f"{rounds} interleaved rounds of {number} calls)\n")
    print("| model | batch | mode | ops | host: eager | none | break | break / none | "
          "break / eager | added per op | latency: eager | none | break | break / none | "
          "break / eager |")
    print("| --- | ---: | --- | ---: |" + " ---: |" * 11)
    for name in ("mlp", "cnn"):
        for batch in BATCHES[name]:
            r = measure(name, batch, number, rounds)
            for mode in ("infer", "train"):
                cells = [name, batch, mode, r["ops"] if mode == "infer" else ""]
                for what in ("host", "latency"):
                    cells += [f"{r[(what, v, mode)]:.0f}" for v in ("eager", "none", "break")]
                    cells += [f"{r[('ratio', what, mode, ref)]:.2f}" for ref in ("none", "eager")]
                    if what == "host":
                        added = r[("host", "break", mode)] - r[("host", "none", mode)]
                        cells.append(f"{added / r['ops']:.1f}")
                print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
