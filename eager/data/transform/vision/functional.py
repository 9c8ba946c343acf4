"""OpenCV operations on (H, W, C) images that keep the channel axis, as MegEngine's
`megengine.data.transform.vision.functional` does: OpenCV drops the channel axis of a
one-channel result, and these put it back, so a mask stays (H, W, 1)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

from ...errors import TransformError
from ...sample_rng import rng
from .transform import image_size


def with_opencv(who: str, image: np.ndarray, call: Callable[[np.ndarray], Any]) -> np.ndarray:
    """`call(image)` with the channel axis kept, OpenCV's error as a TransformError."""
    image_size(image, who)
    try:
        out = np.asarray(call(image))
    except cv2.error as e:
        raise TransformError(f"{who}: OpenCV refused an image of shape {image.shape} and dtype "
                             f"{image.dtype}: {str(e).strip().splitlines()[-1]}") from None
    return out[:, :, None] if out.ndim == 2 else out


def pad_sizes(size: int | Sequence[int]) -> tuple[int, ...]:
    """(top, bottom, left, right) from one size for all four sides, two (bottom, right) or
    four."""
    if isinstance(size, int):
        return (size,) * 4
    if isinstance(size, Sequence) and len(size) == 2:
        return (0, size[0], 0, size[1])
    return tuple(size)


def pad(image: np.ndarray, size: int | Sequence[int], value: Any) -> np.ndarray:
    """`image` with constant borders of `value` (one number, or one per channel); a float
    `value` makes the result float32."""
    top, bottom, left, right = pad_sizes(size)
    if np.asarray(value).dtype == np.float64:
        image = image.astype(np.float32)
    if np.ndim(value) == 0:
        # OpenCV reads a lone number as (value, 0, 0, 0), padding the first channel only
        value = (value,) * 4
    return with_opencv("pad", image, lambda im: cv2.copyMakeBorder(
        im, top, bottom, left, right, cv2.BORDER_CONSTANT, value=value))


def flip(image: np.ndarray, flipCode: int) -> np.ndarray:  # noqa: N803 - OpenCV's name
    """`image` mirrored: flipCode 1 left-right, 0 top-bottom, -1 both."""
    return with_opencv("flip", image, lambda im: cv2.flip(im, flipCode))


def resize(image: np.ndarray, size: Sequence[int],
           interpolation: int | Sequence[int] = cv2.INTER_LINEAR) -> np.ndarray:
    """`image` resized to `size` = (height, width). A sequence of interpolations means one
    drawn at random per call."""
    if len(size) != 2:
        raise TransformError(f"resize: `size` must be (height, width); got {size!r}")
    if isinstance(interpolation, Sequence):
        interpolation = interpolation[rng().randint(len(interpolation))]
    height, width = size
    return with_opencv("resize", image, lambda im: cv2.resize(
        im, (width, height), interpolation=interpolation))


def to_gray(image: np.ndarray) -> np.ndarray:
    """A BGR image as one gray channel, (H, W, 1)."""
    return with_opencv("to_gray", image, lambda im: cv2.cvtColor(im, cv2.COLOR_BGR2GRAY))


def to_bgr(image: np.ndarray) -> np.ndarray:
    """A one-channel gray image as three equal BGR channels."""
    return with_opencv("to_bgr", image, lambda im: cv2.cvtColor(im, cv2.COLOR_GRAY2BGR))
