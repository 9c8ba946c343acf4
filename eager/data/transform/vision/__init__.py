"""MegEngine's `megengine.data.transform.vision`: the image transforms. `transform.py` holds their
base `VisionTransform` and the containers, `geometry.py` those that move pixels, `color.py` those
that change pixel values, `functional.py` the OpenCV operations they share."""

from .color import (
    BrightnessTransform,
    ColorJitter,
    ContrastTransform,
    GaussianNoise,
    HueTransform,
    Lighting,
    Normalize,
    SaturationTransform,
)
from .geometry import (
    CenterCrop,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResize,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    ShortestEdgeResize,
)
from .transform import Compose, ToMode, TorchTransformCompose, VisionTransform

__all__ = [
    "BrightnessTransform", "CenterCrop", "ColorJitter", "Compose", "ContrastTransform",
    "GaussianNoise", "HueTransform", "Lighting", "Normalize", "Pad", "RandomCrop",
    "RandomHorizontalFlip", "RandomResize", "RandomResizedCrop", "RandomVerticalFlip", "Resize",
    "SaturationTransform", "ShortestEdgeResize", "ToMode", "TorchTransformCompose",
    "VisionTransform",
]
