"""One training step of one MegEngine model-zoo model on one side, written to a JSON file.

    python runner.py megengine MODEL WORK OUT    # real MegEngine, on MegEngine's interpreter
    python runner.py project MODEL WORK OUT      # this project, `megengine*` aliased to it

`WORK` holds the inputs (`.npy`, written by the test) and the MegEngine side's initial
`state_dict` (`MODEL.pkl`, written by `megengine.save`), which the project side loads. The zoo
is found through `MEGENGINE_MODELS`. Arrays travel as in `tests/parity/runner.py`: JSON
lists with their dtype and shape, since the two interpreters have different numpy versions.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

DETECTORS = ("retinanet", "fcos", "atss", "freeanchor", "faster_rcnn")


def encode(array: Any) -> dict[str, Any]:
    array = np.asarray(array)
    return {"array": array.tolist(), "dtype": str(array.dtype), "shape": list(array.shape)}


def build(name: str, megengine: Any) -> Any:
    """The model `name` in training mode, its random initialisation seeded."""
    megengine.random.seed(0)
    np.random.seed(0)
    if name == "resnet18":
        from official.vision.classification.resnet.model import resnet18

        model = resnet18()
    else:
        from official.vision.detection.tools.utils import import_from_file

        zoo = os.environ["MEGENGINE_MODELS"]
        net = import_from_file(os.path.join(
            zoo, "official", "vision", "detection", "configs", f"{name}_res18_coco_3x_800size.py"))
        cfg = net.Cfg()
        cfg.backbone_pretrained = False
        if name == "faster_rcnn":
            # `sample_labels` keeps every label when there are no more than it may sample; with
            # these budgets nothing is sampled, so no random stream enters the losses.
            cfg.num_sample_anchors = 10 ** 6
            cfg.num_rois = 10 ** 6
        model = net.Net(cfg)
    model.train()
    return model


# The gradients compared in full: the bottom-up network's stem, one FPN conv, the head's (or
# the classifier's) last layers. Every other parameter's gradient is compared by its norm.
NAMES = {
    "resnet18": ["conv1.weight", "layer4.1.conv2.weight", "fc.weight", "fc.bias"],
    "faster_rcnn": ["backbone.bottom_up.conv1.weight", "backbone.fpn_output2.weight",
                    "rpn.rpn_cls_score.weight", "rcnn.pred_cls.weight"],
    **{name: ["backbone.bottom_up.conv1.weight", "backbone.fpn_output3.weight",
              "head.cls_score.weight", "head.bbox_pred.bias"] for name in DETECTORS
       if name != "faster_rcnn"},
}


def step(model: Any, name: str, inputs: dict[str, np.ndarray], megengine: Any,
         call: Any = None) -> dict[str, Any]:
    """One forward and backward; the losses and every parameter's gradient."""
    import megengine.functional as F
    from megengine.autodiff import GradManager

    params = list(model.parameters())
    for p in params:
        p.grad = None
    gm = GradManager().attach(params)
    call = call or model
    start = time.time()
    with gm:
        if name == "resnet18":
            logits = call(megengine.tensor(inputs["image"]))
            loss = F.nn.cross_entropy(logits, megengine.tensor(inputs["label"]))
            losses = {"total_loss": loss}
        else:
            losses = call(image=megengine.tensor(inputs["image"]),
                          im_info=megengine.tensor(inputs["im_info"]),
                          gt_boxes=megengine.tensor(inputs["gt_boxes"]))
        gm.backward(losses["total_loss"])
    return {"losses": {k: float(v.numpy()) for k, v in losses.items()},
            "grads": {n: None if p.grad is None else p.grad.numpy()
                      for n, p in model.named_parameters()},
            "seconds": time.time() - start}


def record(result: dict[str, Any], names: list[str]) -> dict[str, Any]:
    grads = result["grads"]
    return {"losses": result["losses"], "seconds": result["seconds"],
            "grad_norms": {n: None if g is None else float(np.linalg.norm(g.astype(np.float64)))
                           for n, g in grads.items()},
            "grads": {n: None if grads[n] is None else encode(grads[n]) for n in names}}


def run(side: str, name: str, work: str) -> dict[str, Any]:
    sys.path.insert(0, os.environ["MEGENGINE_MODELS"])
    if side == "project":
        import partial

        partial.alias_megengine()
    import megengine

    inputs = {k[:-4]: np.load(os.path.join(work, k)) for k in os.listdir(work)
              if k.endswith(".npy")}
    state = os.path.join(work, f"{name}.pkl")
    if side == "megengine":
        megengine.config.async_level = 0  # on CPU, asynchronous dispatch gives wrong losses
        model = build(name, megengine)
        megengine.save(model.state_dict(), state)
        return {"eager": record(step(model, name, inputs, megengine), NAMES[name])}

    import eager
    import partial

    names = NAMES[name]
    model = build(name, megengine)
    model.load_state_dict(eager.load(state))
    out = {"eager": record(step(model, name, inputs, megengine), names)}
    model.load_state_dict(eager.load(state))  # BatchNorm statistics as they were
    if name == "resnet18":
        call = partial.partial_trace(model)
    else:
        model.backbone = partial.partial_trace(model.backbone)
        call = None
    out["partial_trace"] = record(step(model, name, inputs, megengine, call), names)
    return out


if __name__ == "__main__":
    side, model_name, work_dir, out_path = sys.argv[1:5]
    result = run(side, model_name, work_dir)
    with open(out_path, "w") as out:  # a file: MegEngine prints notices on stdout
        json.dump(result, out)
