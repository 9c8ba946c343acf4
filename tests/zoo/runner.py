"""One training step of one MegEngine model-zoo model on one side, written to a JSON file.

    python runner.py megengine MODEL WORK OUT    # real MegEngine, on MegEngine's interpreter
    python runner.py project MODEL WORK OUT      # this project, `megengine*` aliased to it

`WORK` holds the inputs (`.npy`, written by the test) and the MegEngine side's initial
`state_dict` (`MODEL.pkl`, written by `megengine.save`), which the project side loads. The zoo
is found through `MEGENGINE_MODELS`. Arrays travel as in `tests/parity/runner.py`: JSON
lists with their dtype and shape, since the two interpreters have different numpy versions.

Dropout modules are put in eval mode after `model.train()`: their random streams differ
between MegEngine and this project, and every other module stays in training mode.

Pretrained backbones: DeepLabV3+ has a config flag (`backbone_pretrained`); SimpleBaseline's
`simplebaseline_res50` always asks `hub` for an ImageNet ResNet-50. The test points
`MGE_HOME` of both subprocesses at a folder of `WORK`, and the MegEngine side first
`megengine.save`s a freshly initialised ResNet-50's `state_dict` at the path its hub would
download to (`MGE_HOME/serialized/<sha256(url)[:6]>_<basename>`), so both hubs read that file
and nothing is downloaded.

CLIP: `official.multimodal` imports DALL-E's tokenizer, `youtokentome`, which does not build
on this Python, and CLIP's tokenizer imports `ftfy` and `regex` (and the DALL-E code `tqdm`);
none of them is used by the model's forward. `youtokentome` is replaced by an empty module
on both sides, and the others by empty modules where they are not installed.

A step that raises on the MegEngine side (after its `state_dict` is saved) is reported as
`{"error": ...}`, so that this project's side still runs and its `partial_trace` run is
still compared with its eager run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types
from typing import Any

import numpy as np

DETECTORS = ("retinanet", "fcos", "atss", "freeanchor", "faster_rcnn")

BERT_CONFIG = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, max_position_embeddings=64,
                   type_vocab_size=2, initializer_range=0.02)
CLIP_CONFIG = dict(embed_dim=32, image_resolution=32, vision_layers=2, vision_width=64,
                   vision_patch_size=8, context_length=8, vocab_size=100, transformer_width=32,
                   transformer_heads=2, transformer_layers=2)


def _stub_tokenizer_modules() -> None:
    """Empty stand-ins for the tokenizers' dependencies (see the module docstring)."""
    import importlib

    sys.modules.setdefault("youtokentome", types.ModuleType("youtokentome"))
    for name in ("ftfy", "regex", "tqdm"):
        try:
            importlib.import_module(name)
        except ImportError:
            module = sys.modules.setdefault(name, types.ModuleType(name))
            if name == "tqdm":
                module.tqdm = lambda iterable=None, *args, **kwargs: iterable


def _pretrained_url(function: Any) -> str:
    """The URL a `@hub.pretrained` function loads from (the decorator's closure holds it)."""
    return next(cell.cell_contents.url for cell in function.__closure__
                if hasattr(cell.cell_contents, "url"))


def _seed_hub_cache(function: Any, megengine: Any) -> None:
    """Save a fresh initialisation of `function`'s model where the hub looks for its weights."""
    import hashlib
    from urllib.parse import urlparse

    url = _pretrained_url(function)
    folder = os.path.join(os.environ["MGE_HOME"], "serialized")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(url.encode()).hexdigest()[:6] + "_"
                        + os.path.basename(urlparse(url).path))
    megengine.save(function().state_dict(), path)


def encode(array: Any) -> dict[str, Any]:
    array = np.asarray(array)
    return {"array": array.tolist(), "dtype": str(array.dtype), "shape": list(array.shape)}


def build(name: str, megengine: Any, side: str) -> Any:
    """The model `name` in training mode (dropout off), its random initialisation seeded."""
    megengine.random.seed(0)
    np.random.seed(0)
    if name == "resnet18":
        from official.vision.classification.resnet.model import resnet18

        model = resnet18()
    elif name == "shufflenet_v2_x0_5":
        from official.vision.classification.shufflenet.model import shufflenet_v2_x0_5

        model = shufflenet_v2_x0_5()
    elif name == "bert":
        from official.nlp.bert.model import BertConfig, BertForSequenceClassification

        model = BertForSequenceClassification(BertConfig.from_dict(BERT_CONFIG), num_labels=2)
    elif name == "deeplabv3plus":
        from official.vision.segmentation.configs.deeplabv3plus_res101_voc_512size import Cfg, Net

        cfg = Cfg()
        cfg.backbone_pretrained = False
        model = Net(cfg)
    elif name == "simplebaseline_res50":
        from official.vision.classification.resnet.model import resnet50
        from official.vision.keypoints.models.simplebaseline import simplebaseline_res50

        if side == "megengine":  # this project's hub reads the same file
            _seed_hub_cache(resnet50, megengine)
        model = simplebaseline_res50()
    elif name == "clip":
        _stub_tokenizer_modules()
        from official.multimodal.clip.models import CLIP, CLIPConfig

        model = CLIP(CLIPConfig(**CLIP_CONFIG))
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
    import megengine.module as M

    model.train()
    for module in model.modules():
        if isinstance(module, M.Dropout):
            module.eval()
    return model


# The gradients compared in full: the bottom-up network's stem, one FPN conv, the head's (or
# the classifier's) last layers. Every other parameter's gradient is compared by its norm.
NAMES = {
    "resnet18": ["conv1.weight", "layer4.1.conv2.weight", "fc.weight", "fc.bias"],
    "shufflenet_v2_x0_5": ["first_conv.0.weight", "features.9.branch_main.6.weight",
                           "classifier.0.weight"],
    "bert": ["bert.embeddings.word_embeddings.weight",
             "bert.encoder.layer.0.attention.self.query.weight", "classifier.weight"],
    "deeplabv3plus": ["backbone.conv1.weight", "aspp.conv1.0.weight", "conv_out.weight",
                      "conv_out.bias"],
    "simplebaseline_res50": ["backbone.conv1.weight", "backbone.layer4.2.conv3.weight",
                             "last_layer.weight", "last_layer.bias"],
    "clip": ["visual.conv1.weight", "token_embedding.weight", "text_projection", "logit_scale"],
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
    tensor = {k: megengine.tensor(v) for k, v in inputs.items()}
    with gm:
        if name in ("resnet18", "shufflenet_v2_x0_5"):
            logits = call(tensor["image"])
            losses = {"total_loss": F.nn.cross_entropy(logits, tensor["label"])}
        elif name == "bert":
            logits, loss = call(tensor["input_ids"], tensor["token_type_ids"],
                                tensor["attention_mask"], tensor["label"])
            losses = {"total_loss": loss, "logits_sum": logits.sum()}
        elif name == "deeplabv3plus":
            out = call(tensor["image"])
            losses = {"total_loss": F.nn.cross_entropy(out, tensor["label"], axis=1)}
        elif name == "simplebaseline_res50":
            out = call(tensor["image"])
            losses = {"total_loss": (out ** 2).mean()}
        elif name == "clip":
            per_image, per_text = call(tensor["image"], tensor["text"])
            loss = (F.nn.cross_entropy(per_image, tensor["label"])
                    + F.nn.cross_entropy(per_text, tensor["label"])) / 2
            losses = {"total_loss": loss, "logits_per_image_mean": per_image.mean()}
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
        model = build(name, megengine, side)
        megengine.save(model.state_dict(), state)
        try:
            return {"eager": record(step(model, name, inputs, megengine), NAMES[name])}
        except (TypeError, RuntimeError, ValueError) as error:  # the test judges it
            return {"error": f"{type(error).__name__}: {error}"}

    import eager
    import partial

    names = NAMES[name]
    model = build(name, megengine, side)
    model.load_state_dict(eager.load(state))
    out = {"eager": record(step(model, name, inputs, megengine), names)}
    model.load_state_dict(eager.load(state))  # BatchNorm statistics as they were
    if name in ("resnet18", "shufflenet_v2_x0_5", "clip"):
        call = partial.partial_trace(model)
    elif name == "bert":
        # the attention reshapes by `F.concat([mge.tensor(x.shape)[:-1], ...])`, a tensor whose
        # value the region cannot read (ValueReadError): split the region there
        model.bert = partial.partial_trace(model.bert, graph_breaks=True)
        call = None
    elif name in ("deeplabv3plus", "simplebaseline_res50"):
        # the models call `backbone.extract_features`, not the backbone's forward
        model.backbone.extract_features = partial.partial_trace(model.backbone.extract_features)
        call = None
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
