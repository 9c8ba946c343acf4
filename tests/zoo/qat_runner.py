"""One quantization-aware training step of a zoo quantization model on one side, as JSON.

    python qat_runner.py megengine MODEL WORK OUT    # real MegEngine, on MegEngine's interpreter
    python qat_runner.py project MODEL WORK OUT      # this project, `megengine*` aliased to it

MODEL is a function of `official/quantization/models` (`resnet18`, `shufflenet_v1_x1_5_g3`,
`mobilenet_v2`), found through `MEGENGINE_MODELS`. The MegEngine side builds it from a seeded
initialisation, converts it with `quantize_qat(model, ema_fakequant_qconfig)` and saves the QAT
model's `state_dict` (`WORK/MODEL.pkl`: weights, BatchNorm statistics, the observers' untouched
statistics); the project side converts its own build the same way and loads that file. Then,
on both: in training mode (MobileNet's Dropout in eval mode: the sides' random streams differ),
one forward of `WORK/image.npy` and backward of the cross entropy against `WORK/label.npy` (the
logits, the loss, every parameter's gradient norm and the full gradients of the first and last
two parameters), every buffer after it (the EMA observers' `min_val` / `max_val` /
`runtime_momentum`, BatchNorm's statistics), then a second forward of `WORK/image2.npy` without
gradients (its logits and the buffers again: the observers' moving average after its first,
assigning, update).

    python qat_runner.py megengine-nudged MODEL WORK OUT

runs MegEngine's side again from the saved state with one BatchNorm's weight (its gamma, 1 at
initialisation; the first by name) scaled by 1 + `NUDGE`: a float32-rounding-sized change of
that folded convolution's weight. How far that run lands from MegEngine's own is the spread of
float32 rounding through fake quantization, against which this project's distance is judged.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

NUDGE = 1e-6


def encode(array: Any) -> dict[str, Any]:
    array = np.asarray(array)
    return {"array": array.tolist(), "dtype": str(array.dtype), "shape": list(array.shape)}


def build(name: str, megengine: Any) -> Any:
    """The zoo's model `name`, seeded, converted for quantization-aware training."""
    import megengine.quantization as Q
    import models  # official/quantization/models, as the zoo's scripts import it

    megengine.random.seed(0)
    np.random.seed(0)
    model = getattr(models, name)()
    Q.quantize_qat(model, qconfig=Q.ema_fakequant_qconfig)
    return model


def steps(model: Any, inputs: dict[str, np.ndarray], megengine: Any) -> dict[str, Any]:
    import megengine.functional as F
    import megengine.module as M
    from megengine.autodiff import GradManager

    model.train()
    for module in model.modules():  # their random streams differ between the sides
        if isinstance(module, M.Dropout):
            module.eval()
    params = list(model.named_parameters())
    gm = GradManager().attach([p for _, p in params])
    with gm:
        logits = model(megengine.tensor(inputs["image"]))
        loss = F.nn.cross_entropy(logits, megengine.tensor(inputs["label"]))
        gm.backward(loss)
    full = [n for n, _ in params[:1] + params[-2:]]
    out = {"logits": encode(logits.numpy()), "loss": float(loss.numpy()),
           "grad_norms": {n: None if p.grad is None else
                          float(np.linalg.norm(p.grad.numpy().astype(np.float64)))
                          for n, p in params},
           "grads": {n: encode(p.grad.numpy()) for n, p in params if n in full},
           "buffers": {n: encode(b.numpy()) for n, b in model.named_buffers()}}
    second = model(megengine.tensor(inputs["image2"]))
    out["logits2"] = encode(second.numpy())
    out["buffers2"] = {n: encode(b.numpy()) for n, b in model.named_buffers()}
    return out


def run(side: str, name: str, work: str) -> dict[str, Any]:
    sys.path.insert(0, os.path.join(os.environ["MEGENGINE_MODELS"], "official", "quantization"))
    if side == "project":
        import partial

        partial.alias_megengine()
    import megengine

    inputs = {k[:-4]: np.load(os.path.join(work, k)) for k in os.listdir(work)
              if k.endswith(".npy")}
    state = os.path.join(work, f"{name}.pkl")
    model = build(name, megengine)
    if side != "project":
        megengine.config.async_level = 0  # on CPU, asynchronous dispatch gives wrong losses
    if side == "megengine":
        megengine.save(model.state_dict(), state)
    else:
        weights = megengine.load(state)
        if side == "megengine-nudged":  # see the module docstring
            first = next(n for n, _ in model.named_parameters() if n.endswith("bn.weight"))
            weights[first] = weights[first] * np.float32(1 + NUDGE)
        model.load_state_dict(weights)
    return steps(model, inputs, megengine)


if __name__ == "__main__":
    side, model_name, work_dir, out_path = sys.argv[1:5]
    result = run(side, model_name, work_dir)
    with open(out_path, "w") as out:  # a file: MegEngine prints notices on stdout
        json.dump(result, out)
