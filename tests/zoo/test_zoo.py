"""MegEngine's official model zoo, one training step, against real MegEngine 1.13.

For ResNet-18 (224x224, batch 2, cross-entropy on fixed labels) and the five res18 detectors
(RetinaNet, FCOS, ATSS, FreeAnchor, Faster R-CNN; 128x128, batch 2, 80 classes, fixed gt
boxes): MegEngine builds the model from a seeded initialisation, saves its `state_dict`, and
runs one forward and backward with a GradManager attached to every parameter; this project
builds the same zoo code unchanged (`partial.alias_megengine()`), loads that `state_dict`, and
runs the same step, once eagerly and once with the backbone (for ResNet-18, the whole model)
compiled by `partial.partial_trace`. Each side runs in its own subprocess (`runner.py`), one
model per process, so memory is freed between models.

Compared: every entry of the loss dict (rtol 1e-4, atol 1e-5), the full gradients of a few
parameters (`runner.NAMES`: the stem conv, one FPN conv, the head's last layers) by relative L2
error (< 1e-3), the L2 norm of every other parameter's gradient (rtol 1e-3), and the
`partial_trace` run against the eager run here (losses to 1e-5, gradients by relative L2 error
< 1e-5). Parameters have MegEngine's shapes here too (a conv bias is (1, C, 1, 1)), so
gradients are compared as they are.

ResNet-18's gradients below the classifier differ from MegEngine's by 7.3e-3 (conv1) and 9.1e-3
(layer4.1.conv2) relative L2 (at most 1.2e-3 in any parameter's gradient norm), while the loss
agrees to 1.4e-7 and the classifier's gradients to 2.6e-6. MegEngine's are the less accurate:
against this project run in float64 on the same state and inputs, this project's float32
gradients differ by 3.4e-4 (conv1) and 7.0e-6 (layer4.1.conv2), MegEngine's by 7.3e-3 and
9.1e-3 (train-mode BatchNorm over 2x7x7 values per channel in layer4 makes these gradients
sensitive: a 1e-6 relative change of the image moves MegEngine's own by 1.2e-3 to 2.3e-3).
They are therefore compared to 2e-2 (`GRAD_REL_L2_OF`: measured, not a guess); the detectors'
(their backbones use frozen BatchNorm, and they agree to about 1e-6), to 1e-3.

FreeAnchor's positive-bag loss is as sensitive in float32 on both sides: against this project
in float64 (pos_loss 3.5849166), this project's float32 pos_loss is 1.3e-5 off and MegEngine's
6.6e-5; their gradients are 1.1e-2 and 2.0e-2 (conv1), 8.3e-3 and 7.5e-3 (fpn_output3), 1.3e-3
and 7.9e-3 (cls_score) off. Neither side is wrong; they are compared to 3e-2.

Further zoo models (this project's side as above; see `runner.py` for their builds):
ShuffleNet V2 x0.5 (224x224, batch 2, cross entropy; the whole model traced), BERT for
sequence classification (hidden 32, 2 layers, inputs (2, 16) int32; `model.bert` traced),
DeepLabV3+ res101 (1x3x64x64, pixelwise cross entropy on fixed labels, no pretrained
backbone; `backbone.extract_features` traced), SimpleBaseline res50 (1x3x128x96, mean of the
squared heatmaps; its hub backbone served from `MGE_HOME`, see `runner.py`;
`backbone.extract_features` traced) and CLIP ViT (embed 32, 32x32 images, context 8; the
symmetric cross entropy of the 2x2 logits; the whole model traced; `youtokentome`, and `ftfy`,
`regex`, `tqdm` where missing, replaced by empty modules, see `runner.py`). Dropout modules
are in eval mode on both sides. CLIP agrees to 1.3e-5 (gradients) and BERT's trace to 6e-7.

GANs (builds and steps in `runner.py`). BigGAN as big_sleep trains it: a 4-block BigGAN (16x16
images, spectral norm on every layer, self-attention, whose zero-initialised gain is set to 0.5
so that its weights get gradients) fed by big_sleep's `Latents` under its `EMA`, the mean of the
squared image as loss, then big_sleep's Adam step on the latents and `EMA.update()`; besides
losses and gradients, `state` (every buffer after the step: the power iteration's `weight_u` /
`weight_v`, the normalised `weight`s, the EMA's accumulator; and the latents, their average and
biased copies) is compared, float ones by relative L2 with the gradients' tolerance, integer ones
exactly; `model.biggan` is traced. VQGAN (`VQModel`, 2x3x32x32 images, 32 codes of 16 channels)
and its Gumbel variant (`GumbelVQ`, kl_weight 1, the Gumbel noise an input): mean |x - x_rec|
plus the quantiser's loss, the code indices in `state` (equal on all sides); `encode` and
`decode` are traced. Against MegEngine: BigGAN's losses to 5e-7, gradients to 1.7e-6, buffers
to 9e-7; VQGAN's losses to 1e-7, gradients to 9.3e-6; the Gumbel VQGAN's to 1.5e-7 and 7.7e-6.
Their traces agree with eager to 2e-6.

megengine_mimicry's DCGAN and WGAN (`official/vision/gan`) have no MegEngine reference: MegEngine
1.13 cannot import them (`nets/losses.py`: `ModuleNotFoundError: No module named
'megengine.core.tensor_factory'`, a module gone since MegEngine 1.0); with it served by
`runner.py`, their generator fails in MegEngine at `F.interpolate` (`AttributeError: module
'megengine.functional' has no attribute 'interpolate'`; 1.13 has `F.nn.interpolate`), and their
`BaseModel.train(mode)` override makes MegEngine 1.13's `Module.train()` / `eval()` raise
`TypeError` (no `recursive` argument). Here they build and run (16x16 images; one generator and
one discriminator loss of the zoo's `losses`), and `netG` and `netD` traced agree with eager to
1e-6 (`MEGENGINE_FAILS`).

BERT has no MegEngine reference: MegEngine 1.13 eager raises `TypeError: py_apply expects
tensor as inputs` at its attention's `F.concat([mge.tensor(x.shape)[:-1], (heads, size)])`
(`MEGENGINE_FAILS`). Here `model.bert` is traced with `graph_breaks=True`: without it the
region stops with `ValueReadError` at `x.reshape(new_x_shape)`, a reshape by a tensor built
from the (static) shape.

Measured against this project in float64 (same state and inputs; relative L2 of a gradient):
ShuffleNet's first_conv / features.9 conv gradients are 1.15e-2 / 9.7e-3 off in MegEngine,
3.1e-3 / 3.1e-3 in eager here, 9.4e-4 / 1.2e-3 under partial_trace (train-mode BatchNorm over
2x7x7 values per channel, as ResNet-18). DeepLabV3+ at batch 1 normalises over 4x4 values in
res5 and one value per channel in ASPP's pooled branch: backbone.conv1 is 9.8e-2 off in
MegEngine, 1.26e-1 in eager and 1.27e-1 under partial_trace (aspp.conv1 4.4e-2, 7.3e-2,
7.2e-2; the loss 2.0e-6, 6.0e-5, 5.6e-5 relative); SimpleBaseline's backbone.conv1 is 4.8e-2
off in MegEngine, 4.1e-2 in eager, 3.7e-2 under partial_trace (layer4.2.conv3 3.4e-2,
1.6e-2, 1.8e-2). Every side is as far from float64 as the sides are from each other, so
these are compared to the measured spread, not to 1e-3: `GRAD_REL_L2_OF` (2e-2, 0.2, 0.1) and,
for partial_trace against eager, `TRACE_GRAD_REL_L2_OF` (1e-2, 0.1, 5e-2). Gradient norms
under `NORM_FLOOR` of the largest are float32 noise around an exact zero on every side.

Randomness: only Faster R-CNN samples (`sample_labels`, in the RPN's anchor labels and the
RCNN's RoIs), with `megengine.random.uniform`, whose stream differs from this project's. The
runner sets `num_sample_anchors` and `num_rois` to 10**6, so `sample_labels` finds no more
labels than it may keep and returns them all: nothing is sampled, and every loss entry is
deterministic and compared. The other detectors assign labels without sampling. Faster
R-CNN's backbone gradients are MegEngine's garbage (its `roi_align` backward, a different
garbage in every run: `MEGENGINE_WRONG_GRADIENTS`): its losses and its RPN's and RCNN head's
gradients are compared with MegEngine's, its backbone's with the `partial_trace` run's here.

Runs when `MEGENGINE_PYTHON` names an interpreter with MegEngine 1.13 (see
`tests/parity/test_parity.py`) and `MEGENGINE_MODELS` a checkout of MegEngine/Models:

    MEGENGINE_PYTHON=.venv-megengine/bin/python MEGENGINE_MODELS=/path/to/Models \\
        python -m pytest -m parity tests/zoo -n 0

Skipped, with that reason, otherwise. The zoo's detectors need `tabulate` on both sides.
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

MODEL_NAMES = ("resnet18", "retinanet", "fcos", "atss", "freeanchor", "faster_rcnn",
               "shufflenet_v2_x0_5", "bert", "deeplabv3plus", "simplebaseline_res50", "clip",
               "biggan", "vqgan", "vqgan_gumbel", "dcgan", "wgan")
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-5
GRAD_REL_L2 = 1e-3
# see the module docstring: float32 rounding amplified, measured against float64
GRAD_REL_L2_OF = {"resnet18": 2e-2, "freeanchor": 3e-2, "shufflenet_v2_x0_5": 2e-2,
                  "deeplabv3plus": 0.2, "simplebaseline_res50": 0.1}
# A gradient norm below this fraction of the model's largest is float32 noise around an exact
# zero (a conv bias before train-mode BatchNorm, an attention key's bias): 1e-18 of the largest
# in float64, up to 1e-7 of it in float32 on either side; compared only to this absolute floor.
NORM_FLOOR = 1e-6

# MegEngine's gradients of the parameters under a prefix are wrong: they are left out of the
# comparison (losses and every other gradient are compared as usual). Faster R-CNN: MegEngine
# 1.13's roi_align backward adds into a gradient buffer it never clears (tests/parity/
# cases_detection.py records it against finite differences), and the RCNN head's gradient
# reaches the backbone through it: MegEngine's backbone gradients are garbage that changes from
# run to run (|grad conv1| 1e11 to 2e24 in three runs, NaN in another; ours 1.519), while every
# loss entry and the RPN's and RCNN head's gradients agree.
MEGENGINE_WRONG_GRADIENTS = {"faster_rcnn": "backbone."}
# MegEngine itself fails the step: no reference to compare with. An entry naming the
# error MegEngine reports (`runner.py` catches it after saving the state) still runs this
# project's side and compares its `partial_trace` run with its eager run; the others are
# xfailed whole.
MEGENGINE_FAILS = {
    "bert": ("TypeError: py_apply expects tensor as inputs",
             "MegEngine 1.13 eager fails in BertSelfAttention.transpose_for_scores, "
             "`F.concat([mge.tensor(x.shape)[:-1], (heads, size)])`: concat of a Tensor and a "
             "tuple raises `TypeError: py_apply expects tensor as inputs`, so the zoo's BERT "
             "has no MegEngine reference as written"),
    **{name: ("AttributeError: module 'megengine.functional' has no attribute 'interpolate'",
              "megengine_mimicry's GBlock upsamples with `F.interpolate`, which MegEngine 1.13 "
              "has only as `F.nn.interpolate` (and its losses import "
              "`megengine.core.tensor_factory`, gone since 1.0, which runner.py serves): "
              "the zoo's GANs have no MegEngine 1.13 reference as written")
       for name in ("dcgan", "wgan")},
    "fcos": "MegEngine 1.13 fails in fcos.get_ground_truth, `areas[~is_cared_in_the_level] = "
            "inf`: megdnn naive MaskedFill assertion at 128x128 "
            "(a 256x256 input may avoid it: not checked)",
}
TRACE_TOL = 1e-5
# gradients of partial_trace against eager, where float32 rounding is amplified (see the
# module docstring: both are as far from float64 as from each other)
TRACE_GRAD_REL_L2_OF = {"shufflenet_v2_x0_5": 1e-2, "deeplabv3plus": 0.1,
                        "simplebaseline_res50": 5e-2}


def _skip_reason() -> str | None:
    if not INTERPRETER:
        return ("set MEGENGINE_PYTHON to an interpreter with MegEngine 1.13 to compare "
                "against it (see this module's docstring)")
    if not MODELS:
        return "set MEGENGINE_MODELS to a checkout of MegEngine's model zoo (MegEngine/Models)"
    if not (Path(MODELS) / "official" / "vision" / "detection").is_dir():
        return f"MEGENGINE_MODELS={MODELS} has no official/vision/detection: not the model zoo"
    return None


pytestmark = [pytest.mark.parity,
              pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


def _inputs(name: str, work: Path) -> None:
    """The fixed inputs of `name`'s step, as `.npy` files both interpreters read."""
    rng = np.random.RandomState(0)
    if name in ("resnet18", "shufflenet_v2_x0_5"):
        np.save(work / "image.npy", rng.rand(2, 3, 224, 224).astype("float32"))
        np.save(work / "label.npy", np.array([3, 771], "int32"))
        return
    if name == "bert":
        np.save(work / "input_ids.npy", rng.randint(0, 100, (2, 16)).astype("int32"))
        np.save(work / "token_type_ids.npy", np.array([[0] * 10 + [1] * 6] * 2, "int32"))
        np.save(work / "attention_mask.npy", np.array([[1] * 16, [1] * 12 + [0] * 4], "int32"))
        np.save(work / "label.npy", np.array([0, 1], "int32"))
        return
    if name == "deeplabv3plus":
        np.save(work / "image.npy", rng.rand(1, 3, 64, 64).astype("float32"))
        np.save(work / "label.npy", rng.randint(0, 21, (1, 64, 64)).astype("int32"))
        return
    if name == "simplebaseline_res50":
        np.save(work / "image.npy", rng.rand(1, 3, 128, 96).astype("float32"))
        return
    if name == "biggan":  # big_sleep's latents are parameters: no inputs
        return
    if name in ("vqgan", "vqgan_gumbel"):
        np.save(work / "image.npy", (rng.rand(2, 3, 32, 32) * 2 - 1).astype("float32"))
        if name == "vqgan_gumbel":  # the Gumbel noise's uniform draws, (batch, codes, 16, 16)
            np.save(work / "gumbel_uniform.npy", rng.rand(2, 32, 16, 16).astype("float32"))
        return
    if name in ("dcgan", "wgan"):
        np.save(work / "noise.npy", rng.randn(2, 16).astype("float32"))
        np.save(work / "image.npy", rng.rand(2, 3, 16, 16).astype("float32"))
        return
    if name == "clip":
        np.save(work / "image.npy", rng.rand(2, 3, 32, 32).astype("float32"))
        np.save(work / "text.npy", rng.randint(1, 100, (2, 8)).astype("int32"))
        np.save(work / "label.npy", np.array([0, 1], "int32"))
        return
    batch, height, width = 2, 128, 128
    np.save(work / "image.npy", (rng.rand(batch, 3, height, width) * 255).astype("float32"))
    np.save(work / "im_info.npy", np.array([[height, width, height, width, 3]] * batch,
                                           "float32"))
    np.save(work / "gt_boxes.npy", np.array(  # x0, y0, x1, y1, class
        [[[10, 12, 60, 70, 1], [50, 40, 110, 100, 17], [70, 5, 120, 50, 63]],
         [[5, 60, 55, 120, 3], [30, 20, 90, 80, 41], [80, 80, 125, 126, 79]]], "float32"))


def _side(python: str, side: str, name: str, work: Path) -> dict[str, Any]:
    out = work / f"{side}.json"
    env = {**os.environ, "MEGENGINE_MODELS": str(Path(MODELS).expanduser().resolve()),
           "MGE_HOME": str(work / "mge_home")}  # pretrained backbones: see runner.py
    done = subprocess.run([python, str(HERE / "runner.py"), side, name, str(work), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name}: {side} runner failed:\n{done.stderr[-3000:]}"
    return json.loads(out.read_text())


def _run(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp(name)
    _inputs(name, work)
    theirs = _side(str(Path(INTERPRETER).expanduser()), "megengine", name, work)  # saves state
    ours = _side(sys.executable, "project", name, work)
    return {"megengine": theirs.get("eager", theirs), "eager": ours["eager"],
            "partial_trace": ours["partial_trace"]}


def _array(value: dict[str, Any] | None) -> np.ndarray | None:
    if value is None:
        return None
    return np.array(value["array"], dtype=value["dtype"]).reshape(value["shape"])


def _rel_l2(ours: np.ndarray, theirs: np.ndarray) -> float:
    ours, theirs = ours.astype(np.float64), theirs.astype(np.float64)
    return float(np.linalg.norm(ours - theirs) / max(np.linalg.norm(theirs), 1e-30))


def _compare(ours: dict[str, Any], theirs: dict[str, Any], what: str, loss_rtol: float,
             loss_atol: float, grad_rel: float) -> None:
    assert sorted(ours["losses"]) == sorted(theirs["losses"]), \
        f"{what}: loss entries {sorted(ours['losses'])}, want {sorted(theirs['losses'])}"
    for key, want in theirs["losses"].items():
        assert ours["losses"][key] == pytest.approx(want, rel=loss_rtol, abs=loss_atol), \
            f"{what}: loss {key} = {ours['losses'][key]!r}, want {want!r}"
    assert sorted(ours["grad_norms"]) == sorted(theirs["grad_norms"]), f"{what}: parameter names"
    floor = NORM_FLOOR * max([v for v in theirs["grad_norms"].values() if v is not None] or [0])
    for key, want in theirs["grad_norms"].items():
        got = ours["grad_norms"][key]
        assert (got is None) == (want is None), \
            f"{what}: gradient of {key} is {got!r}, want {want!r}"
        if want is not None:
            assert got == pytest.approx(want, rel=grad_rel, abs=max(1e-8, floor)), \
                f"{what}: |grad {key}| = {got!r}, want {want!r}"
    for key, want in theirs["grads"].items():
        got, want = _array(ours["grads"][key]), _array(want)
        assert (got is None) == (want is None), f"{what}: gradient of {key}"
        if want is not None:
            assert got.shape == want.shape, f"{what}: grad {key} shape {got.shape}, {want.shape}"
            error = _rel_l2(got, want)
            assert error < grad_rel, f"{what}: grad {key} relative L2 error {error:.3g}"
    # what the step leaves besides gradients (the GANs': buffers, updated latents, code indices)
    assert sorted(ours["state"]) == sorted(theirs["state"]), \
        f"{what}: state entries {sorted(ours['state'])}, want {sorted(theirs['state'])}"
    for key, want in theirs["state"].items():
        got, want = _array(ours["state"][key]), _array(want)
        assert got.shape == want.shape, f"{what}: {key} shape {got.shape}, want {want.shape}"
        if want.dtype.kind in "biu":
            assert np.array_equal(got, want), \
                f"{what}: {key} differs at {int((got != want).sum())} of {want.size} places"
        else:
            error = _rel_l2(got, want)
            assert error < grad_rel, f"{what}: {key} relative L2 error {error:.3g}"


@pytest.fixture(scope="module", params=MODEL_NAMES)
def result(request, tmp_path_factory) -> tuple[str, dict[str, Any]]:
    if isinstance(MEGENGINE_FAILS.get(request.param), str):
        pytest.xfail(MEGENGINE_FAILS[request.param])
    return request.param, _run(request.param, tmp_path_factory)


def test_step_agrees_with_megengine(result):
    name, runs = result
    if "error" in runs["megengine"]:
        assert name in MEGENGINE_FAILS, f"{name}: MegEngine failed: {runs['megengine']['error']}"
        error, reason = MEGENGINE_FAILS[name]
        assert runs["megengine"]["error"].startswith(error), runs["megengine"]["error"]
        pytest.xfail(reason)
    assert name not in MEGENGINE_FAILS, f"{name}: MegEngine no longer fails; remove the entry"
    ours, theirs = runs["eager"], runs["megengine"]
    if name in MEGENGINE_WRONG_GRADIENTS:
        prefix = MEGENGINE_WRONG_GRADIENTS[name]
        ours, theirs = _without(ours, prefix), _without(theirs, prefix)
        assert ours["grad_norms"], f"{name}: no gradient left outside {prefix}"
    _compare(ours, theirs, f"{name} (eager vs MegEngine)", LOSS_RTOL, LOSS_ATOL,
             GRAD_REL_L2_OF.get(name, GRAD_REL_L2))


def _without(run: dict[str, Any], prefix: str) -> dict[str, Any]:
    """`run` without the gradients of the parameters whose names start with `prefix`."""
    def keep(names: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in names.items() if not k.startswith(prefix)}
    return {**run, "grad_norms": keep(run["grad_norms"]), "grads": keep(run["grads"])}


def test_partial_trace_agrees_with_eager(result):
    name, runs = result
    _compare(runs["partial_trace"], runs["eager"], f"{name} (partial_trace vs eager)",
             TRACE_TOL, TRACE_TOL, TRACE_GRAD_REL_L2_OF.get(name, TRACE_TOL))
