"""Vision transforms' base (MegEngine's `megengine.data.transform.vision.transform`):
`VisionTransform`, the dispatch of `(image, boxes, mask, ...)` tuples by kind, and the
transforms that hold others (`Compose`, `TorchTransformCompose`) or change the layout (`ToMode`).

A vision transform receives one sample: a bare image, or a tuple whose elements are named by
the transform's `order` ("image", "boxes", "mask", ...). Each element goes to the method of its
kind, `_apply_<kind>`; a kind ending in "category" or "info" with no such method passes through,
as do elements past the end of `order`.

Transforms that draw random numbers or measure the image do it once per `apply` and keep what
they found on a shallow copy of themselves (`_for_call`), never on the shared instance: a
`DataLoader` may run one transform object from several threads at once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import cv2
import numpy as np

from ...errors import TransformError, UnsupportedError
from ...sample_rng import rng
from ..meta_transform import Transform

_Self = TypeVar("_Self", bound="VisionTransform")


def image_size(image: np.ndarray, who: str) -> tuple[int, int]:
    """(height, width) of an (H, W, C) image, or a TransformError naming `who`."""
    shape = np.shape(image)
    if len(shape) != 3:
        raise TransformError(f"{who}: the image must be (H, W, C), 3 dimensions; got shape "
                             f"{shape}. Add a channel axis to a gray image: image[:, :, None]")
    return shape[0], shape[1]


class VisionTransform(Transform):
    """Base of the image transforms: `apply` sends each element of a sample to the method of
    the kind its `order` names (see the module's docstring). A subclass implements
    `_apply_image`, and `_apply_coords` (points as an (N, 2) array of x, y) and `_apply_mask`
    where they mean something; boxes, keypoints and polygons are handled through
    `_apply_coords`."""

    def __init__(self, order: Sequence[str] | None = None) -> None:
        if order is None:
            order = ("image",)
        elif not isinstance(order, Sequence):
            raise TransformError(f"{type(self).__name__}: `order` must be a sequence of kinds "
                                 f"such as ('image', 'boxes'); got {order!r}")
        for kind in order:
            if kind == "batch":
                raise TransformError(f"{type(self).__name__}: 'batch' cannot be a kind of "
                                     f"`order`; apply_batch transforms batches")
            # categories and infos are passed through when nothing handles them
            if kind.endswith(("category", "info")):
                continue
            if self._get_apply(kind) is None:
                raise UnsupportedError(
                    f"{type(self).__name__} cannot transform a {kind!r} (no `_apply_{kind}` "
                    f"method); `order` {tuple(order)!r}")
        self.order = order

    # `order` is a property so that containers (Compose, ColorJitter, RandomCrop's padding)
    # can hand a new order on to what they hold; MegEngine's Compose sets its children's order.
    @property
    def order(self) -> Sequence[str]:
        return self._order

    @order.setter
    def order(self, value: Sequence[str]) -> None:
        self._order = value
        self._order_changed()

    def _order_changed(self) -> None:
        """Called when `order` is set: a container passes it on to its parts."""

    def apply(self, input: Any) -> Any:
        return self._dispatch(input)

    def _dispatch(self, input: Any) -> Any:
        """Each element of the sample through the method of its kind (a bare value is a
        1-tuple); a one-element result is returned bare."""
        items = input if isinstance(input, tuple) else (input,)
        out = []
        for item, kind in zip(items, self.order):
            method = self._get_apply(kind)
            out.append(item if method is None else method(item))
        out.extend(items[len(self.order):])
        return out[0] if len(out) == 1 else tuple(out)

    def _for_call(self: _Self, **state: Any) -> _Self:
        """A shallow copy carrying one call's draws and measurements (see the module's
        docstring)."""
        call = copy.copy(self)
        call.__dict__.update(state)
        return call

    def _get_apply(self, kind: str) -> Callable[[Any], Any] | None:
        return getattr(self, f"_apply_{kind}", None)

    def _get_image(self, input: Any) -> np.ndarray:
        items = input if isinstance(input, tuple) else (input,)
        if "image" not in self.order:
            raise TransformError(f"{type(self).__name__} needs an 'image' in `order` to "
                                 f"measure; `order` is {tuple(self.order)!r}")
        at = list(self.order).index("image")
        if at >= len(items):
            raise TransformError(f"{type(self).__name__}: `order` puts the image at position "
                                 f"{at}, but the sample has {len(items)} element(s)")
        return items[at]

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement _apply_image")

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement _apply_coords")

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not implement _apply_mask")

    def _apply_boxes(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes: their four corners moved, then the box around each moved set."""
        boxes = np.asarray(boxes).reshape(-1, 4)
        corners = boxes[:, [0, 1, 2, 1, 0, 3, 2, 3]].reshape(-1, 2)
        moved = self._apply_coords(corners).reshape(-1, 4, 2)
        return np.concatenate((moved.min(axis=1), moved.max(axis=1)), axis=1)

    def _apply_keypoints(self, keypoints: np.ndarray) -> np.ndarray:
        """(N, K, 3) keypoints: x, y moved per instance, the third column (label) kept."""
        points = np.array(keypoints[..., :2])
        moved = [self._apply_coords(p) for p in points]
        # an image without instances has no points to move (np.stack refuses an empty list)
        stacked = np.stack(moved) if moved else points
        return np.concatenate((stacked, keypoints[..., 2:]), axis=-1)

    def _apply_polygons(self, polygons: Sequence[Sequence[np.ndarray]]) -> list:
        return [[self._apply_coords(p) for p in instance] for instance in polygons]


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


__all__ = ["VisionTransform", "ToMode", "Compose", "TorchTransformCompose"]
