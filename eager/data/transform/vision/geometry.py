"""Transforms that move pixels: padding, resizing, cropping and flipping.

Each moves the points of boxes, keypoints and polygons with the pixels and resizes masks with
nearest-neighbour interpolation, so labels keep their values. Random choices are drawn from
`eager.data.sample_rng.rng()` in MegEngine's order and number, so that after `np.random.seed(s)`
a transform outside a DataLoader gives MegEngine's result bit for bit. Points are returned as
new arrays: the caller's are never changed (MegEngine's are, in place).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ...errors import TransformError, UnsupportedError
from ...sample_rng import rng
from . import functional as F
from .transform import VisionTransform, image_size


def _shifted(coords: np.ndarray, dx: float, dy: float) -> np.ndarray:
    out = np.array(coords)
    out[:, 0] += dx
    out[:, 1] += dy
    return out


def _scaled(coords: np.ndarray, sx: float, sy: float) -> np.ndarray:
    # assigned back into a copy of the input, so integer points stay integers (truncated)
    out = np.array(coords)
    out[:, 0] = out[:, 0] * sx
    out[:, 1] = out[:, 1] * sy
    return out


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (size[0], size[1])


class Pad(VisionTransform):
    """Constant borders around the image (`value`) and the mask (`mask_value`). `size`: one
    number for all four sides, (bottom, right), or (top, bottom, left, right). A float `value`
    makes the image float32."""

    def __init__(self, size: int | Sequence[int] = 0, value: Any = 0, mask_value: int = 0, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if isinstance(size, int) or (isinstance(size, Sequence) and len(size) in (2, 4)):
            self.size = F.pad_sizes(size)
        else:
            raise TransformError(f"Pad: `size` must be one int or a sequence of 2 (bottom, "
                                 f"right) or 4 (top, bottom, left, right); got {size!r}")
        if not isinstance(mask_value, int):
            raise TransformError(f"Pad: `mask_value` must be an int (a label); got "
                                 f"{mask_value!r}")
        self.value = value
        self.mask_value = mask_value

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return F.pad(image, self.size, self.value)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return _shifted(coords, self.size[2], self.size[0])

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return F.pad(mask, self.size, self.mask_value)


class _Resizing(VisionTransform):
    """What the resizing transforms share: `_get_shape(image)` gives (h, w, new h, new w) once
    per call, and the image, points and mask follow it."""

    interpolation: int | Sequence[int]
    _shape_info: tuple[int, int, int, int]

    def apply(self, input: Any) -> Any:
        return self._for_call(_shape_info=self._get_shape(self._get_image(input)))._dispatch(input)

    def _get_shape(self, image: np.ndarray) -> tuple[int, int, int, int]:
        raise NotImplementedError

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        h, w, th, tw = self._shape_info
        if (h, w) == (th, tw):
            return image
        return F.resize(image, (th, tw), self.interpolation)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        h, w, th, tw = self._shape_info
        if (h, w) == (th, tw):
            return coords
        return _scaled(coords, tw / w, th / h)

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        h, w, th, tw = self._shape_info
        if (h, w) == (th, tw):
            return mask
        return F.resize(mask, (th, tw), cv2.INTER_NEAREST)


class Resize(_Resizing):
    """Resize to `output_size` = (height, width), or, given one int, so that the shorter side
    has that length (the longer side scaled alike, rounded down)."""

    def __init__(self, output_size: int | Sequence[int],
                 interpolation: int | Sequence[int] = cv2.INTER_LINEAR, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.output_size = output_size
        self.interpolation = interpolation

    def _get_shape(self, image: np.ndarray) -> tuple[int, int, int, int]:
        h, w = image_size(image, "Resize")
        size = self.output_size
        if not isinstance(size, int):
            th, tw = size
            return h, w, th, tw
        if min(h, w) == size:
            return h, w, h, w
        if h < w:
            return h, w, size, int(size * w / h)
        return h, w, int(size * h / w), size


class ShortestEdgeResize(_Resizing):
    """Resize so that the shorter side has a random length from `min_size` (an int, or a
    (low, high) range for `sample_style="range"`, a set of choices for "choice"), unless that
    makes the longer side exceed `max_size`, which then bounds it."""

    def __init__(self, min_size: int | Sequence[int], max_size: int,
                 sample_style: str = "range",
                 interpolation: int | Sequence[int] = cv2.INTER_LINEAR, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if sample_style not in ("range", "choice"):
            raise UnsupportedError(f"ShortestEdgeResize: `sample_style` must be 'range' or "
                                   f"'choice'; got {sample_style!r}")
        self.sample_style = sample_style
        self.min_size = (min_size, min_size) if isinstance(min_size, int) else min_size
        self.max_size = max_size
        self.interpolation = interpolation

    def _get_shape(self, image: np.ndarray) -> tuple[int, int, int, int]:
        h, w = image_size(image, "ShortestEdgeResize")
        if self.sample_style == "range":
            size = rng().randint(self.min_size[0], self.min_size[1] + 1)
        else:
            size = rng().choice(self.min_size)
        scale = size / min(h, w)
        th, tw = (size, scale * w) if h < w else (scale * h, size)
        if max(th, tw) > self.max_size:
            scale = self.max_size / max(th, tw)
            th, tw = th * scale, tw * scale
        return h, w, int(round(th)), int(round(tw))


class RandomResize(_Resizing):
    """Resize by a factor drawn uniformly from `scale_range` = (low, high)."""

    def __init__(self, scale_range: Sequence[float],
                 interpolation: int | Sequence[int] = cv2.INTER_LINEAR, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.scale_range = scale_range
        self.interpolation = interpolation

    def _get_shape(self, image: np.ndarray) -> tuple[int, int, int, int]:
        h, w = image_size(image, "RandomResize")
        scale = rng().uniform(self.scale_range[0], self.scale_range[1])
        return h, w, int(round(h * scale)), int(round(w * scale))


class RandomCrop(VisionTransform):
    """A crop of `output_size` at a random place, after padding by `padding_size` (as `Pad`).
    An image still smaller than the crop is padded at the bottom and right to fit."""

    # one call's padded image size and crop corner (see `_for_call`)
    _h: int
    _w: int
    _x: int
    _y: int

    def __init__(self, output_size: int | Sequence[int], padding_size: int | Sequence[int] = 0,
                 padding_value: Any = (0, 0, 0), padding_maskvalue: int = 0, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.output_size = _pair(output_size)
        self.pad = Pad(padding_size, padding_value, padding_maskvalue, order=self.order)
        self.padding_value = padding_value
        self.padding_maskvalue = padding_maskvalue

    def _order_changed(self) -> None:
        # the padding must see the boxes and masks too (MegEngine's keeps its first order)
        if "pad" in self.__dict__:
            self.pad.order = self.order

    def apply(self, input: Any) -> Any:
        input = self.pad.apply(input)
        h, w = image_size(self._get_image(input), "RandomCrop")
        th, tw = self.output_size
        x = rng().randint(0, max(0, w - tw) + 1)
        y = rng().randint(0, max(0, h - th) + 1)
        return self._for_call(_h=h, _w=w, _x=x, _y=y)._dispatch(input)

    def _crop(self, image: np.ndarray, value: Any) -> np.ndarray:
        th, tw = self.output_size
        if th > self._h:
            image = F.pad(image, (th - self._h, 0), value)
        if tw > self._w:
            image = F.pad(image, (0, tw - self._w), value)
        return image[self._y:self._y + th, self._x:self._x + tw]

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return self._crop(image, self.padding_value)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return _shifted(coords, -self._x, -self._y)

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return self._crop(mask, self.padding_maskvalue)


class RandomResizedCrop(VisionTransform):
    """A crop of random area (a fraction of the image's drawn from `scale_range`) and aspect
    ratio (drawn log-uniformly from `ratio_range`), resized to `output_size`. After 10 draws
    that do not fit in the image, the centre crop of the nearest allowed ratio."""

    _coord_info: tuple[int, int, int, int]  # one call's crop: x, y, width, height

    def __init__(self, output_size: int | Sequence[int],
                 scale_range: Sequence[float] = (0.08, 1.0),
                 ratio_range: Sequence[float] = (3.0 / 4, 4.0 / 3),
                 interpolation: int | Sequence[int] = cv2.INTER_LINEAR, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.output_size = _pair(output_size)
        for name, (low, high) in (("scale_range", scale_range), ("ratio_range", ratio_range)):
            if low > high:
                raise TransformError(f"RandomResizedCrop: `{name}` must be (min, max); got "
                                     f"{(low, high)!r}")
        self.scale_range = scale_range
        self.ratio_range = ratio_range
        self.interpolation = interpolation

    def apply(self, input: Any) -> Any:
        return self._for_call(_coord_info=self._get_coord(self._get_image(input)))._dispatch(input)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        x, y, w, h = self._coord_info
        return F.resize(image[y:y + h, x:x + w], self.output_size, self.interpolation)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        x, y, w, h = self._coord_info
        out = _shifted(coords, -x, -y)
        out[:, 0] = out[:, 0] * self.output_size[1] / w
        out[:, 1] = out[:, 1] * self.output_size[0] / h
        return out

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        x, y, w, h = self._coord_info
        return F.resize(mask[y:y + h, x:x + w], self.output_size, cv2.INTER_NEAREST)

    def _get_coord(self, image: np.ndarray, attempts: int = 10) -> tuple[int, int, int, int]:
        """(x, y, width, height) of the crop."""
        height, width = image_size(image, "RandomResizedCrop")
        area = height * width
        log_ratio = (math.log(self.ratio_range[0]), math.log(self.ratio_range[1]))
        for _ in range(attempts):
            target_area = rng().uniform(self.scale_range[0], self.scale_range[1]) * area
            aspect_ratio = math.exp(rng().uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                x = rng().randint(0, width - w + 1)
                y = rng().randint(0, height - h + 1)
                return x, y, w, h
        in_ratio = width / height
        w, h = width, height
        if in_ratio < min(self.ratio_range):
            h = int(round(w / min(self.ratio_range)))
        elif in_ratio > max(self.ratio_range):
            w = int(round(h * max(self.ratio_range)))
        return (width - w) // 2, (height - h) // 2, w, h


class CenterCrop(VisionTransform):
    """The centre crop of `output_size` = (height, width) or one int for a square."""

    _coord_info: tuple[int, int]  # one call's crop corner: x, y

    def __init__(self, output_size: int | Sequence[int], *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.output_size = _pair(output_size)

    def apply(self, input: Any) -> Any:
        return self._for_call(_coord_info=self._get_coord(self._get_image(input)))._dispatch(input)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        x, y = self._coord_info
        th, tw = self.output_size
        return image[y:y + th, x:x + tw]

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        x, y = self._coord_info
        return _shifted(coords, -x, -y)

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return self._apply_image(mask)

    def _get_coord(self, image: np.ndarray) -> tuple[int, int]:
        th, tw = self.output_size
        h, w = image_size(image, "CenterCrop")
        if th > h or tw > w:
            raise TransformError(f"CenterCrop: the crop {(th, tw)} is larger than the image "
                                 f"{(h, w)}; pad or resize first")
        return int(round((w - tw) / 2.0)), int(round((h - th) / 2.0))


class _RandomFlip(VisionTransform):
    """Mirror the image, mask and points along `_axis` (0: rows, 1: columns) with
    probability `prob`."""

    _axis: int
    _flipped: bool  # one call's draw, and the length of the flipped axis
    _length: int

    def __init__(self, prob: float = 0.5, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.prob = prob

    def apply(self, input: Any) -> Any:
        flipped = rng().random_sample() < self.prob
        # not image_size: MegEngine reads only this one length, so an unflipped 2-d image passes
        length = np.shape(self._get_image(input))[self._axis]
        return self._for_call(_flipped=flipped, _length=length)._dispatch(input)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        # OpenCV's flip codes: 1 mirrors left-right (axis 1), 0 top-bottom (axis 0)
        return F.flip(image, flipCode=self._axis) if self._flipped else image

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        if not self._flipped:
            return coords
        out = np.array(coords)
        column = 1 - self._axis  # x (column 0) moves when columns are mirrored
        out[:, column] = self._length - out[:, column]
        return out

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return self._apply_image(mask)


class RandomHorizontalFlip(_RandomFlip):
    """Mirror left-right with probability `prob`."""

    _axis = 1


class RandomVerticalFlip(_RandomFlip):
    """Mirror top-bottom with probability `prob`."""

    _axis = 0
