"""int8 inference against float32 inference of the same model, both compiled: the model zoo's
quantization ResNet-18 (`official/quantization/models/resnet.py`, found through
`MEGENGINE_MODELS`, imported under `partial.alias_megengine()`), once as built (float32, eval
mode) and once through `quantize_qat`, a calibration batch and `quantize` (the int8 modules:
int8 convolutions with int32 accumulation, `eager.module.quantized`), each under
`partial.trace(symbolic=True, capture_as_const=True)` as the zoo's `inference.py` runs it.

Run `python -m benchmarks.quantized_inference [--batch 8] [--rounds 9] [--arch resnet18]`.
The two are timed in alternating rounds in one process (as `benchmarks/interleaved.py` does),
so drift of a shared machine hits both alike; it prints the machine, the median ms per batch of
each and the median of the per-round ratios int8 / float32, and how far the int8 model's
outputs are from the float model's (top-1 agreement on the random images).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import eager as eg
import eager.functional as F
import partial
from eager.quantization import quantize, quantize_qat

ZOO = os.environ.get("MEGENGINE_MODELS", "/work/shared/megengine-models")


def zoo_models() -> Any:
    """The zoo's `official.quantization.models`, its `megengine` imports served here."""
    sys.path.insert(0, ZOO)
    partial.alias_megengine()
    try:
        return importlib.import_module("official.quantization.models")
    finally:
        partial.unalias_megengine()
        sys.path.remove(ZOO)


def compiled(model: Any) -> Callable[[Any], Any]:
    """`model`'s softmax output under MegEngine's deployment decorator."""
    @partial.trace(symbolic=True, capture_as_const=True)
    def infer_func(data: Any) -> Any:
        model.eval()
        return F.softmax(model(data))

    return infer_func


def build(arch: str, batch: int) -> tuple[dict[str, Callable], Any]:
    """The float32 and int8 runners of the zoo's `arch`, and an input batch."""
    models = zoo_models()
    x = eg.tensor(np.random.default_rng(0).standard_normal((batch, 3, 224, 224), np.float32))
    float_model = getattr(models, arch)().eval()
    int8_model = getattr(models, arch)()
    int8_model.load_state_dict(float_model.state_dict())
    quantize_qat(int8_model)
    int8_model(x)  # calibration: the observers see one batch
    quantize(int8_model)
    return {"float32": compiled(float_model), "int8": compiled(int8_model.eval())}, x


def timed(fn: Callable, x: Any, steps: int) -> float:
    """Median seconds of `steps` calls, each waited for."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn(x).numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    return (f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, jax {jax.__version__} on "
            f"{jax.devices()[0].device_kind}, load average {os.getloadavg()[0]:.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    runners, x = build(args.arch, args.batch)
    outs = {k: fn(x).numpy() for k, fn in runners.items()}  # compiles both
    rows = [{k: timed(fn, x, args.steps) for k, fn in runners.items()}
            for _ in range(args.rounds)]
    ms = {k: statistics.median(r[k] for r in rows) * 1e3 for k in runners}
    ratio = statistics.median(r["int8"] / r["float32"] for r in rows)
    agree = float(np.mean(outs["int8"].argmax(1) == outs["float32"].argmax(1)))
    print(machine())
    print(f"\n## {args.arch}, batch {args.batch}, compiled (trace(symbolic=True, "
          f"capture_as_const=True)): medians of {args.rounds} interleaved rounds\n")
    print("| model | ms per batch | int8 / float32 |\n| --- | ---: | ---: |")
    print(f"| float32 | {ms['float32']:.1f} | |")
    print(f"| int8 | {ms['int8']:.1f} | {ratio:.2f} |")
    print(f"\ntop-1 agreement int8 vs float32 on random images: {agree:.2f}; max |p| difference "
          f"{np.abs(outs['int8'] - outs['float32']).max():.3g}")


if __name__ == "__main__":
    main()
