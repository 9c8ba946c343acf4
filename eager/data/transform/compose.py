"""Transforms that hold other transforms (Compose, TorchTransformCompose) and ToMode, the
layout change from (H, W, C) images to the (C, H, W) a network takes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

from ..sample_rng import rng
from .base import Transform, TransformError, VisionTransform


class ToMode(VisionTransform):
    """(H, W, C) images and masks to `mode`; "CHW", the only mode, puts channels first."""

    def __init__(self, mode: str = "CHW", *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if mode != "CHW":
            raise TransformError(f"ToMode: the only mode is 'CHW'; got {mode!r}")
        self.mode = mode

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(image, 2, 0))

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return self._apply_image(mask)


class Compose(VisionTransform):
    """Several transforms one after the other. Its `order` becomes theirs.

    `shuffle_indices`: groups of 1-based positions in `transforms` whose members run in a new
    random order for every sample; `[(1, 2, 3)]` shuffles the first three. `batch_compose`:
    `apply_batch` runs each transform over the whole batch before the next (no shuffling then).

    >>> import numpy as np
    >>> import eager.data.transform as T
    >>> t = T.Compose([T.CenterCrop(4), T.ToMode("CHW")])
    >>> t.apply(np.zeros((6, 8, 3), np.uint8)).shape
    (3, 4, 4)
    """

    def __init__(self, transforms: Sequence[Transform] = (), batch_compose: bool = False,
                 shuffle_indices: Sequence[Sequence[int]] | None = None, *,
                 order: Sequence[str] | None = None) -> None:
        self.transforms = list(transforms)  # before `order` is set: it is handed on to these
        super().__init__(order)
        if batch_compose and shuffle_indices is not None:
            raise TransformError("Compose: `batch_compose` runs one order for the whole batch, "
                                 "so it cannot be combined with `shuffle_indices`")
        self.batch_compose = batch_compose
        self.shuffle_indices = None if shuffle_indices is None else [
            tuple(self._position(i) for i in group) for group in shuffle_indices]

    def _position(self, index: int) -> int:
        """The 0-based position of 1-based `index`, checked."""
        if not 1 <= index <= len(self.transforms):
            raise TransformError(f"Compose: `shuffle_indices` are 1-based positions in the "
                                 f"{len(self.transforms)} transforms; got {index}")
        return index - 1

    def _order_changed(self) -> None:
        for t in self.__dict__.get("transforms", ()):
            t.order = self.order  # any transform may carry one, as in MegEngine

    def apply_batch(self, inputs: Sequence[Any]) -> Any:
        if not self.batch_compose:
            return super().apply_batch(inputs)
        for t in self.transforms:
            inputs = t.apply_batch(inputs)
        return inputs

    def apply(self, input: Any) -> Any:
        for t in self._shuffle():
            input = t.apply(input)
        return input

    def _shuffle(self) -> list[Transform]:
        """The transforms in this sample's order."""
        if self.shuffle_indices is None:
            return self.transforms
        source = list(range(len(self.transforms)))
        for group in self.shuffle_indices:
            for at, taken in zip(group, rng().permutation(group).tolist()):
                source[at] = taken
        return [self.transforms[i] for i in source]


class TorchTransformCompose(VisionTransform):
    """torchvision transforms (callables on PIL images) applied to a BGR uint8 image: the image
    goes to PIL as RGB and comes back as BGR. Transforms that return tensors (ToTensor,
    Normalize) do not fit. Needs Pillow."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]], *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.transforms = transforms

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        from PIL import Image

        picture: Any = Image.fromarray(_swap_red_blue(image, cv2.COLOR_BGR2RGB).astype(np.uint8))
        for t in self.transforms:
            picture = t(picture)
        if isinstance(picture, Image.Image) or _is_accimage(picture):
            picture = np.array(picture, dtype=np.uint8)
        return _swap_red_blue(picture, cv2.COLOR_RGB2BGR)


def _swap_red_blue(image: Any, code: int) -> Any:
    # MegEngine takes a first axis of 3 for channels first, else a last axis of 3 for last
    if image.shape[0] == 3:
        return np.ascontiguousarray(image[[2, 1, 0]])
    if image.shape[2] == 3:
        return cv2.cvtColor(image, code)
    return image


def _is_accimage(image: Any) -> bool:
    try:
        import accimage  # type: ignore[import-not-found]  # optional torchvision backend
    except ImportError:
        return False
    return isinstance(image, accimage.Image)
