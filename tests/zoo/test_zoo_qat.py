"""Quantization-aware training of the zoo's quantization models against real MegEngine 1.13.

For ResNet-18, ShuffleNet V1 x1.5 (g3) and MobileNet V2 of `official/quantization/models`
(2 random images of 224x224 in [-128, 127], as the zoo's scripts feed them, fixed labels):
MegEngine builds the model seeded, converts it with `quantize_qat(model,
ema_fakequant_qconfig)` and saves its `state_dict`; this project converts its own build and
loads it (`qat_runner.py`; each side in its own subprocess). Compared after one training-mode
forward and backward, and a second forward of other images: the logits of both forwards, the
loss, every parameter's gradient norm, the full gradients of three parameters, and every buffer
after each forward (the EMA observers' `min_val` / `max_val`, BatchNorm's statistics).

Fake quantization makes this chaotic: a float32 rounding difference moves an activation
observer's maximum by an ulp, which moves the scale and flips some values across a rounding
boundary; each flip is a whole quantization step, and the next layer's BatchNorm statistics,
observers and flips follow. Layer by layer on the same inputs, ResNet-18's layers here and in
MegEngine differ in 2.5e-5 to 1.1e-3 of their outputs by one quantization step, as float32
rounding predicts; through 20 layers that grows to logits 2% apart. MegEngine against itself
with the first BatchNorm's gamma scaled by 1 + 1e-6 (`megengine-nudged` in `qat_runner.py`)
lands as far from its own run, so every chaotic quantity is compared against that run's
distance: at most `FACTOR` times it (or `FLOOR`). What float32 cannot move is compared tightly:
the QuantStub's observer exactly, the first convolution's observers and BatchNorm statistics to
`FIRST_RTOL`, and every observer's `runtime_momentum` exactly (the EMA's first, assigning
update, then its momentum).

Runs when `MEGENGINE_PYTHON` names an interpreter with MegEngine 1.13 and `MEGENGINE_MODELS`
the model zoo (see `test_zoo.py`); slow (a few minutes per model on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INTERPRETER = os.environ.get("MEGENGINE_PYTHON")
MODELS = os.environ.get("MEGENGINE_MODELS")
MODEL_NAMES = ("resnet18", "shufflenet_v1_x1_5_g3", "mobilenet_v2")
FACTOR, FLOOR = 5.0, 1e-5
FIRST_RTOL = 5e-5  # of the buffer's largest value: float32 sums over 2x112x112 values
NORM_FLOOR = 1e-6  # of the largest gradient norm: float32 noise around an exact zero


def _skip_reason() -> str | None:
    if not INTERPRETER:
        return "set MEGENGINE_PYTHON to an interpreter with MegEngine 1.13 (see test_zoo.py)"
    if not MODELS or not (Path(MODELS) / "official" / "quantization").is_dir():
        return "set MEGENGINE_MODELS to a checkout of MegEngine's model zoo (MegEngine/Models)"
    return None


pytestmark = [pytest.mark.parity, pytest.mark.slow,
              pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


def _side(python: str, side: str, name: str, work: Path) -> dict[str, Any]:
    out = work / f"{side}.json"
    env = {**os.environ, "MEGENGINE_MODELS": str(Path(MODELS or "").expanduser().resolve())}
    done = subprocess.run([python, str(HERE / "qat_runner.py"), side, name, str(work), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{name}: {side} runner failed:\n{done.stderr[-3000:]}"
    return json.loads(out.read_text())


def _array(value: dict[str, Any]) -> np.ndarray:
    return np.array(value["array"], dtype=value["dtype"]).reshape(value["shape"])


def _rel_l2(ours: np.ndarray, theirs: np.ndarray) -> float:
    ours, theirs = ours.astype(np.float64), theirs.astype(np.float64)
    return float(np.linalg.norm(ours - theirs) / max(np.linalg.norm(theirs), 1e-30))


def distances(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """How far one side's step is from another's, quantity by quantity (relative)."""
    out = {"loss": abs(ours["loss"] - theirs["loss"]) / abs(theirs["loss"])}
    for key in ("logits", "logits2"):
        out[key] = _rel_l2(_array(ours[key]), _array(theirs[key]))
    for name, grad in theirs["grads"].items():
        out[f"grad {name}"] = _rel_l2(_array(ours["grads"][name]), _array(grad))
    norms = theirs["grad_norms"]
    floor = NORM_FLOOR * max(v for v in norms.values() if v is not None)
    out["grad norms"] = max(abs(ours["grad_norms"][n] - v) / v for n, v in norms.items()
                            if v is not None and v > floor)
    for key in ("buffers", "buffers2"):
        for kind, names in _buffer_kinds(theirs[key]).items():
            out[f"{key} {kind}"] = max(_max_rel(_array(ours[key][n]), _array(theirs[key][n]))
                                       for n in names)
    return out


def _buffer_kinds(buffers: dict[str, Any]) -> dict[str, list[str]]:
    observers = [n for n in buffers if n.endswith(("min_val", "max_val"))]
    return {"observers": observers,
            "batchnorm": [n for n in buffers if ".running_" in n or n.startswith("running_")]}


def _max_rel(ours: np.ndarray, theirs: np.ndarray) -> float:
    theirs = theirs.astype(np.float64)
    return float(np.abs(ours.astype(np.float64) - theirs).max() /
                 max(np.abs(theirs).max(), 1e-30))


def _first_layer(result: dict[str, Any]) -> str:
    """The prefix of the first BatchNorm'd convolution (`conv_bn_relu1.`, ...)."""
    first = next(n for n in result["grad_norms"] if n.endswith("bn.weight"))
    return first[:-len("bn.weight")]


def check_tight(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """What float32 rounding cannot move: the input's observer, the first layer's statistics,
    the observers' momenta."""
    first = _first_layer(theirs)
    for key in ("buffers", "buffers2"):
        for name, value in theirs[key].items():
            mine, want = _array(ours[key][name]), _array(value)
            if name.startswith("quant.") or name.endswith(("runtime_momentum", ".momentum")):
                np.testing.assert_array_equal(mine, want, err_msg=f"{key} {name}")
            elif name.startswith(first):
                assert _max_rel(mine, want) <= FIRST_RTOL, (key, name, mine, want)


@pytest.fixture(scope="module", params=MODEL_NAMES)
def sides(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    name = request.param
    work = tmp_path_factory.mktemp(name)
    rng = np.random.RandomState(0)
    for key in ("image", "image2"):
        np.save(work / f"{key}.npy", (rng.randint(0, 256, (2, 3, 224, 224)) - 128)
                .astype("float32"))
    np.save(work / "label.npy", np.array([3, 771], "int32"))
    megengine = str(Path(INTERPRETER or "").expanduser())
    theirs = _side(megengine, "megengine", name, work)  # saves the state the others load
    nudged = _side(megengine, "megengine-nudged", name, work)
    ours = _side(sys.executable, "project", name, work)
    return name, ours, theirs, nudged


def test_qat_step_agrees_with_megengine(sides: tuple) -> None:
    name, ours, theirs, nudged = sides
    assert set(ours["grad_norms"]) == set(theirs["grad_norms"])
    assert set(ours["buffers"]) == set(theirs["buffers"])
    assert all((ours["grad_norms"][n] is None) == (v is None)
               for n, v in theirs["grad_norms"].items())
    check_tight(ours, theirs)
    here, spread = distances(ours, theirs), distances(nudged, theirs)
    report = {k: (f"{here[k]:.2e}", f"{spread[k]:.2e}") for k in here}
    print(name, report)
    worse = {k: v for k, v in report.items() if here[k] > max(FACTOR * spread[k], FLOOR)}
    assert not worse, f"{name}: (ours, MegEngine nudged) from MegEngine: {worse}"
