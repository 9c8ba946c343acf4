"""The training steps `benchmarks.zoo` times: MegEngine model-zoo models run by this project
(through the `megengine` alias, the zoo's code unchanged) and their torchvision counterparts in
PyTorch, eager or with `torch.compile` of the backbone.

Both sides train what the zoo's `tools/train.py` trains, with the same settings on each side:
ResNet-18 FPN backbones with frozen BatchNorm and conv1 and layer1 frozen (the zoo's
`backbone_freeze_at = 2`, torchvision's `trainable_layers=3`), 80 classes, 256x256 images,
batch 2, SGD as the zoo's detectors train (lr 0.01 / 16 per image, momentum 0.9, weight
decay 1e-4); ResNet-18 classification on 224x224
images, 1000 classes, every parameter trained. torchvision's detectors are built with
`min_size = max_size = 256`, so their transform keeps the image size.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

MODELS = ("retinanet", "fcos", "faster_rcnn", "resnet18")
SIZE, BATCH, CLASSES = 256, 2, 80
LR, MOMENTUM, WEIGHT_DECAY = 0.01 / 16 * BATCH, 0.9, 1e-4
# (x0, y0, x1, y1, class): MegEngine's classes count from 1, torchvision's labels are the same ints
BOXES = np.array([[10, 10, 60, 70, 1], [30, 40, 200, 220, 3], [120, 20, 250, 110, 7]], "float32")


def inputs(name: str) -> dict[str, np.ndarray]:
    """The fixed batch of every step of `name`. `ZOO_IMAGE_SCALE` in the environment scales the
    image (1 + 1e-6, say): how far a rounding-sized change moves the losses (see
    `tests/zoo/test_zoo_modes.py`)."""
    rng = np.random.RandomState(0)
    scale = np.float32(os.environ.get("ZOO_IMAGE_SCALE", "1"))
    if name == "resnet18":
        return {"image": rng.standard_normal((BATCH, 3, 224, 224)).astype("float32") * scale,
                "label": rng.randint(0, 1000, BATCH).astype("int32")}
    image = rng.uniform(0, 255, (BATCH, 3, SIZE, SIZE)).astype("float32") * scale
    info = np.array([[SIZE, SIZE, SIZE, SIZE, len(BOXES)]] * BATCH, "float32")
    return {"image": image, "im_info": info, "gt_boxes": np.stack([BOXES] * BATCH)}


# ----- this project, running the zoo's code ---------------------------------------------------
def project_step(name: str, mode: str) -> Callable[[], float]:
    """A function running one training step of zoo model `name` here and returning its loss.

    Modes: "eager"; "backbone" (`model.backbone` under `partial_trace`; ResNet-18: the whole
    model); "head" (backbone and box head under `partial_trace`, one-stage detectors); "breaks"
    (the detector's whole forward, losses included, under `partial_trace(graph_breaks=True)`:
    compiled stretches between its value reads); "step" (ResNet-18: the whole step, optimizer
    included, under `xla_trace`).
    """
    zoo = _zoo_on_path()
    import megengine
    import megengine.functional as F
    from megengine.autodiff import GradManager
    from megengine.optimizer import SGD

    import partial

    megengine.random.seed(0)
    np.random.seed(0)
    model, trained = _zoo_model(name, zoo)
    if mode in ("backbone", "head"):
        if name == "resnet18":
            model = partial.partial_trace(model)
        else:
            model.backbone = partial.partial_trace(model.backbone)
    if mode == "head":
        model.head = partial.partial_trace(model.head)
    if mode == "breaks":
        model = partial.partial_trace(model, graph_breaks=True)
    gm = GradManager().attach(trained)
    opt = SGD(trained, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    data = {k: megengine.tensor(v) for k, v in inputs(name).items()}

    def step() -> Any:
        with gm:
            if name == "resnet18":
                loss = F.nn.cross_entropy(model(data["image"]), data["label"])
            else:
                loss = model(image=data["image"], im_info=data["im_info"],
                             gt_boxes=data["gt_boxes"])["total_loss"]
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    run = partial.xla_trace(step) if mode == "step" else step
    return lambda: float(run().numpy())


def _zoo_on_path() -> str:
    """The zoo's folder, put on `sys.path`, with `megengine` aliased to this project."""
    zoo = os.environ.get("MEGENGINE_MODELS")
    if not zoo:
        raise SystemExit("benchmarks: set MEGENGINE_MODELS to the model zoo's folder")
    if zoo not in sys.path:
        sys.path.insert(0, zoo)
    import partial

    partial.alias_megengine()
    return zoo


def zoo_forward(name: str) -> tuple[Any, list, Callable[[], Any]]:
    """Zoo model `name` (training mode), the parameters its step trains and a function running
    one eager training forward on `inputs(name)` (`benchmarks.conv_layers` records it)."""
    zoo = _zoo_on_path()
    import megengine

    megengine.random.seed(0)
    np.random.seed(0)
    model, trained = _zoo_model(name, zoo)
    data = {k: megengine.tensor(v) for k, v in inputs(name).items()}
    if name == "resnet18":
        return model, trained, lambda: model(data["image"])
    return model, trained, lambda: model(image=data["image"], im_info=data["im_info"],
                                         gt_boxes=data["gt_boxes"])


def _zoo_model(name: str, zoo: str) -> tuple[Any, list]:
    """The zoo's model `name` in training mode and the parameters its training updates."""
    if name == "resnet18":
        from official.vision.classification.resnet.model import resnet18

        model = resnet18()
        model.train()
        return model, list(model.parameters())
    from official.vision.detection.tools.utils import import_from_file

    net = import_from_file(os.path.join(zoo, "official", "vision", "detection", "configs",
                                        f"{name}_res18_coco_3x_800size.py"))
    cfg = net.Cfg()
    cfg.backbone_pretrained = False
    model = net.Net(cfg)
    model.train()
    frozen = ("bottom_up.conv1", "bottom_up.layer1")[:cfg.backbone_freeze_at]
    return model, [p for n, p in model.named_parameters() if not any(f in n for f in frozen)]


# ----- torchvision, in PyTorch ------------------------------------------------------------------
def torch_step(name: str, mode: str = "eager") -> Callable[[], float]:
    """A function running one training step of the torchvision counterpart of `name`.

    Modes: "eager"; "compile" (`torch.compile`, default mode, of the detector's backbone, the
    FPN included, in place with `Module.compile`; ResNet-18: of the whole model, as this
    project's "backbone" mode compiles it). `torch.compile` compiles on the first call, so the
    first step pays it.
    """
    import torch

    torch.set_num_threads(int(os.environ.get("ZOO_TORCH_THREADS", "2")))
    torch.manual_seed(0)
    model, loss_of = _torchvision_model(name)
    if mode == "compile":
        (model if name == "resnet18" else model.backbone).compile()
    elif mode != "eager":
        raise ValueError(f"torch_step: unknown mode {mode!r} (eager, compile)")
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trained, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)

    def step() -> float:
        loss = loss_of()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def _torchvision_model(name: str) -> tuple[Any, Callable[[], Any]]:
    """torchvision's counterpart of `name` and a function computing its training loss."""
    import torch
    import torchvision
    from torchvision.models.detection import FCOS, FasterRCNN, RetinaNet
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7

    batch = inputs(name)
    images = torch.from_numpy(batch["image"] / np.float32(1 if name == "resnet18" else 255))
    if name == "resnet18":
        model = torchvision.models.resnet18(num_classes=1000)
        labels = torch.from_numpy(batch["label"]).long()
        return model, lambda: torch.nn.functional.cross_entropy(model(images), labels)
    if name == "faster_rcnn":
        backbone = resnet_fpn_backbone(backbone_name="resnet18", weights=None)
        model = FasterRCNN(backbone, num_classes=CLASSES + 1, min_size=SIZE, max_size=SIZE)
    else:
        backbone = resnet_fpn_backbone(backbone_name="resnet18", weights=None,
                                       returned_layers=[2, 3, 4],
                                       extra_blocks=LastLevelP6P7(256, 256))
        kind = {"retinanet": RetinaNet, "fcos": FCOS}[name]
        model = kind(backbone, num_classes=CLASSES, min_size=SIZE, max_size=SIZE)
    targets = [{"boxes": torch.from_numpy(b[:, :4]), "labels": torch.from_numpy(b[:, 4]).long()}
               for b in batch["gt_boxes"]]
    image_list = list(images)
    return model, lambda: sum(model(image_list, targets).values())
