"""int8 inference of the zoo's quantization models against real MegEngine 1.13.

For ResNet-18, ShuffleNet V1 x1.5 (g3) and MobileNet V2 of `official/quantization/models`
(`int8_runner.py`; each side in its own subprocess): MegEngine builds the model seeded,
converts it with `quantize_qat(model, ema_fakequant_qconfig)`, runs two training-mode forwards
of random images (the zoo's `train.py --mode qat` without its optimizer steps: observers gather
statistics, BatchNorm's statistics move), converts it with `quantize` and runs a batch of two
random 224x224 images in [-128, 127] through the int8 model. This project loads MegEngine's QAT
state into its own conversion and converts with its `quantize`; then loads MegEngine's int8
`state_dict` (int8 weights in quantized dtypes with their scales, float biases) and runs the
same images twice: on its own activations ("free"), and with every int8 leaf module fed
MegEngine's inputs instead ("forced": a difference stays in the layer that makes it).

Compared: every int8 weight, its scale and every float entry (folded biases, the float
classifier) of this project's conversion against MegEngine's, exactly; every int8 layer's output
scale, exactly; every int8 leaf module's output and the DequantStub's input (the last int8
activation) as integer storage; the logits after the float classifier. The conversion's run
must equal the loaded state's run bit for bit. Forced, every output is at most one step from
MegEngine's and at most `MAX_FORCED` of them differ; where none does, the free run is
MegEngine's exactly and the logits agree to float32 rounding.

Measured (MegEngine 1.13, x86 CPU, 2 cores):

- ResNet-18: 11.2M int8 weights, 20 weight and 35 output scales equal; forced and free, all
  8,329,216 int8 outputs equal (the last activation's 1,024 too); logits within 1e-6.
- ShuffleNet V1 x1.5: 3.4M weights, 52 and 70 scales equal; all 15,483,216 outputs equal.
- MobileNet V2: 2.2M weights, 52 and 63 scales equal; forced, 2 of 14,090,048 outputs one step
  apart (features.9.conv.0: the float32 sum of the dequantized accumulator and bias lands on a
  half, which MegEngine rounds three times and XLA:CPU once, in a fused multiply-add: see
  `eager/core/ops/quantized.py`). Free, those two steps propagate: 191,271 outputs differ, by
  up to 19 steps in the last blocks, and 221 of the last activation's 2,560 by one step.

Before the requantization was made MegEngine's (the accumulator dequantized, then quantized, not
one multiplier), ResNet-18's layer1.0 had one such tie and the free run 54,451 outputs apart.
Runs in about 45 s per model on 2 cores (134 s for the three, compiled int8 ops cached).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.zoo.quantization_sides import INTERPRETER, MARKS, MODEL_NAMES, run_side

MAX_FORCED = 1e-6  # of the int8 outputs, one step apart when fed MegEngine's inputs (measured
# 1.4e-7: MobileNet V2's 2 bias ties, see the module docstring)


pytestmark = MARKS


def _side(python: str, side: str, name: str, work: Path) -> dict[str, np.ndarray]:
    out = work / f"{side}.npz"
    run_side("int8_runner.py", python, side, name, work, out)
    with np.load(out) as arrays:
        return dict(arrays)


def apart(ours: np.ndarray, theirs: np.ndarray) -> tuple[int, int, int]:
    """(elements, elements that differ, the most quantization steps between them)."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    diff = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
    return diff.size, int((diff > 0).sum()), int(diff.max(initial=0))


def keys(arrays: dict[str, np.ndarray], kind: str) -> list[str]:
    """The names of one kind, in the order the runner recorded them (the forward's order)."""
    return [k for k in arrays if k.startswith(kind)]


def _total(pairs: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    return (sum(p[0] for p in pairs), sum(p[1] for p in pairs), max(p[2] for p in pairs))


@pytest.fixture(scope="module", params=MODEL_NAMES)
def sides(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    name = request.param
    work = tmp_path_factory.mktemp(name)
    rng = np.random.RandomState(1)
    for key in ("calib0", "calib1", "image"):
        np.save(work / f"{key}.npy", (rng.randint(0, 256, (2, 3, 224, 224)) - 128)
                .astype("float32"))
    theirs = _side(str(Path(INTERPRETER or "").expanduser()), "megengine", name, work)
    ours = _side(sys.executable, "project", name, work)
    return name, ours, theirs


def _report(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> dict[str, tuple]:
    """(elements, differing, most steps apart) of each comparison, and the first layer that
    differs when fed MegEngine's inputs."""
    outs = keys(theirs, "out/")
    report = {"converted weights": _total([apart(ours["converted/" + k], theirs[k])
                                           for k in keys(theirs, "weight/")])}
    for run in ("forced/", "", "converted/"):
        report[f"{run or 'free/'}layers"] = _total([apart(ours[run + k], theirs[k])
                                                    for k in outs])
        report[f"{run or 'free/'}last"] = apart(ours[run + "last"], theirs["last"])
    report["first forced difference"] = tuple(
        k for k in outs if apart(ours["forced/" + k], theirs[k])[1])[:1]
    return report


def test_int8_inference_agrees_with_megengine(sides: tuple) -> None:
    name, ours, theirs = sides
    for kind in ("weight/", "wscale/", "float/", "out/", "scale/"):
        assert keys(ours, kind) == keys(theirs, kind), kind
        assert keys(ours, "converted/" + kind) == ["converted/" + k for k in keys(theirs, kind)]
    report = _report(ours, theirs)
    print(name, report)
    for kind in ("wscale/", "scale/"):  # the same observers give the same scales, exactly
        for k in keys(theirs, kind):
            assert ours[k] == theirs[k] == ours["converted/" + k], k
    for k in keys(theirs, "weight/") + keys(theirs, "float/"):  # our conversion is MegEngine's
        np.testing.assert_array_equal(ours["converted/" + k], theirs[k], err_msg=k)
        np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)  # loaded: bit for bit
    for k in keys(theirs, "out/") + ["last", "logits"]:  # same weights, same program
        np.testing.assert_array_equal(ours["converted/" + k], ours[k], err_msg=k)
    elements, differing, steps = report["forced/layers"]
    assert steps <= 1 and differing <= MAX_FORCED * elements, report
    if differing == 0:  # no tie anywhere: the whole run is MegEngine's
        assert report["free/layers"][1] == 0, report
        np.testing.assert_allclose(ours["logits"], theirs["logits"], rtol=1e-5, atol=1e-6)
