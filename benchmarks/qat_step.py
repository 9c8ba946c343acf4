"""A quantization-aware training step against the float step of the same model, side by side.

Run `MEGENGINE_MODELS=../shared/megengine-models python -m benchmarks.qat_step [--batch 4]
[--rounds 5] [--steps 2] [--modes xla,partial]`.

The model is the quantization zoo's ResNet-18 (`official/quantization/models/resnet.py`, its
code unchanged through the `megengine` alias): once as built (float, its ConvBn / ConvBnRelu
modules and `Elemwise` adds computing in float32) and once after
`quantize_qat(model, ema_fakequant_qconfig)` (weights and activations fake-quantized to int8,
EMA observers updated every step, BatchNorm folded into the quantized weight). A step is the
zoo's: forward on `--batch` random 224x224 images (the model's final 7x7 average pool needs
224), cross entropy, backward and SGD with momentum and weight decay; compiled either whole
under `partial.xla_trace` ("xla") or with the model under `partial.partial_trace` and the
optimizer eager ("partial"). Both variants are warmed up (compiled), then timed in alternating
rounds of `--steps` synced steps (`benchmarks/interleaved.py`: a shared machine's drift hits
both alike), and the QAT / float ratio is the median over rounds of the per-round ratio. The
issue's goal is at most 1.3 (the fake quantization fused into the compiled region). The
persistent compilation cache is turned off, so "first" is a first step's compile and run.

2026-11-29, 2 CPUs shared with other jobs (load 4-5; Linux x86_64, Python 3.11.7, jax 0.10.2 on
cpu), batch 4, 9 rounds of 3 steps, two runs: xla 0.709 / 1.407 s float, 0.739 / 1.664 s QAT,
ratio 1.21 / 1.22; partial 1.049 / 0.867 s, 1.124 / 1.008 s, ratio 1.12 / 1.16 (per-round
ratios 0.94 to 1.83). First steps (cache off) 14.5 s float, 19.8 s QAT under xla.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .suite import machine

GOAL = 1.3
LR, MOMENTUM, WEIGHT_DECAY = 0.0125, 0.9, 1e-4  # the zoo's ResnetConfig


def _zoo_models() -> Any:
    """The quantization zoo's `models` package, `megengine` aliased to this project."""
    zoo = os.environ.get("MEGENGINE_MODELS")
    if not zoo:
        raise SystemExit("benchmarks.qat_step: set MEGENGINE_MODELS to the model zoo's folder")
    folder = os.path.join(zoo, "official", "quantization")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import partial

    partial.alias_megengine()
    import models

    return models


def make_step(qat: bool, mode: str, batch: int) -> Callable[[], float]:
    """One training step of the zoo's ResNet-18 (QAT or float), compiled as `mode` says;
    returns a function running it and returning the loss."""
    models = _zoo_models()
    import megengine
    import megengine.functional as F
    import megengine.quantization as Q
    from megengine.autodiff import GradManager
    from megengine.optimizer import SGD

    import partial

    megengine.random.seed(0)
    np.random.seed(0)
    model = models.resnet18()
    if qat:
        Q.quantize_qat(model, qconfig=Q.ema_fakequant_qconfig)
    model.train()
    params = list(model.parameters())
    gm = GradManager().attach(params)
    opt = SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    rng = np.random.RandomState(0)
    image = megengine.tensor((rng.randint(0, 256, (batch, 3, 224, 224)) - 128).astype("float32"))
    label = megengine.tensor(rng.randint(0, 1000, (batch,)).astype("int32"))
    forward = partial.partial_trace(model) if mode == "partial" else model

    def step() -> Any:
        with gm:
            loss = F.nn.cross_entropy(forward(image), label)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    run = partial.xla_trace(step) if mode == "xla" else step
    return lambda: float(run().numpy())


def _timed(step: Callable[[], float], steps: int) -> float:
    """Median seconds of `steps` consecutive steps (each synced by reading its loss)."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(mode: str, batch: int, rounds: int, steps: int) -> dict[str, Any]:
    """Float and QAT steps of `mode`, warmed up, then timed in alternating rounds."""
    variants = {"float": make_step(False, mode, batch), "qat": make_step(True, mode, batch)}
    first = {}
    for name, step in variants.items():
        start = time.perf_counter()
        step()  # compiles
        first[name] = time.perf_counter() - start
        step()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            times[name].append(_timed(variants[name], steps))
    ratios = [q / f for q, f in zip(times["qat"], times["float"])]
    return {"mode": mode, "first": first,
            "median": {name: statistics.median(ts) for name, ts in times.items()},
            "ratio": statistics.median(ratios), "ratios": ratios}


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, measure each mode and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per round")
    parser.add_argument("--modes", default="xla,partial")
    args = parser.parse_args(argv)
    import partial

    # first steps compile: never from (nor into) the user's persistent cache
    partial.set_cache_dir(None)
    print(f"machine: {machine()}")
    print(f"zoo quantization ResNet-18, batch {args.batch}x3x224x224, {args.rounds} rounds of "
          f"{args.steps} steps; goal: QAT / float <= {GOAL}")
    print(f"{'mode':8} {'float s':>9} {'QAT s':>9} {'QAT/float':>10} {'first float':>12} "
          f"{'first QAT':>10}  per-round ratios")
    for mode in args.modes.split(","):
        r = measure(mode, args.batch, args.rounds, args.steps)
        print(f"{mode:8} {r['median']['float']:9.3f} {r['median']['qat']:9.3f} "
              f"{r['ratio']:10.2f} {r['first']['float']:12.1f} {r['first']['qat']:10.1f}  "
              + " ".join(f"{x:.2f}" for x in r["ratios"]), flush=True)


if __name__ == "__main__":
    main()
