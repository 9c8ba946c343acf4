"""MegEngine's `megengine.data.transform`: per-sample transforms of images and their labels.

A vision transform takes a bare (H, W, C) image or a tuple such as (image, boxes, mask) whose
elements its `order` names. Random draws come from `eager.data.sample_rng.rng()`: inside a
`DataLoader` a generator of the sample's own (so augmentations repeat from the loader's seed),
outside one numpy's global generator, where `np.random.seed(s)` gives MegEngine's draws.

>>> import numpy as np
>>> import eager.data.transform as T
>>> image = np.zeros((32, 48, 3), np.uint8)
>>> boxes = np.array([[4, 4, 20, 12]], np.float32)
>>> out, moved = T.Resize((16, 24), order=("image", "boxes")).apply((image, boxes))
>>> out.shape, moved.tolist()
((16, 24, 3), [[2.0, 2.0, 10.0, 6.0]])
"""

from ..errors import TransformError, UnsupportedError
from . import vision
from .meta_transform import PseudoTransform, Transform
from .vision import *  # noqa: F403  (MegEngine serves them from here too)

__all__ = ["PseudoTransform", "Transform", "TransformError", "UnsupportedError", *vision.__all__]
