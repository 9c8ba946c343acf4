"""Transforms that change pixel values only: normalization, noise and colour jitter. Boxes,
points and masks pass through unchanged.

Random factors are drawn from `eager.data.sample_rng.rng()` in MegEngine's order and number,
and the arithmetic keeps MegEngine's float types (its numpy, before NEP 50, computed some
scalars in float64), so after `np.random.seed(s)` the pixels are MegEngine's bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ...errors import TransformError
from ...sample_rng import rng
from . import functional as F
from .transform import Compose, VisionTransform


class _Photometric(VisionTransform):
    """A transform of pixel values: points and masks are returned as they came."""

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return mask


def _strength(who: str, value: Any, high: float = float("inf")) -> float:
    """`value`, checked to be a number in [0, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TransformError(f"{who}: the strength must be one number; got {value!r}")
    if not 0 <= value <= high:
        bound = "non-negative" if high == float("inf") else f"in [0, {high}]"
        raise TransformError(f"{who}: the strength must be {bound}; got {value!r}")
    return float(value)


class Normalize(_Photometric):
    """(image - mean) / std per channel, in float32 (float64 for a float64 image)."""

    def __init__(self, mean: Any = 0.0, std: Any = 1.0, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if image.ndim != 3 or self.mean.ndim > 1 or self.std.ndim > 1:
            return (image - self.mean) / self.std
        # The same operations, one channel plane at a time into a channel-first buffer (8x
        # faster than broadcasting 3-vectors along the last axis): the result is an (H, W, C)
        # view of it, so a `ToMode("CHW")` after it costs no copy.
        out = np.empty((image.shape[2], *image.shape[:2]),
                       np.result_type(image.dtype, self.mean.dtype, self.std.dtype))
        np.subtract(np.moveaxis(image, 2, 0), self.mean.reshape(-1, 1, 1), out=out)
        np.divide(out, self.std.reshape(-1, 1, 1), out=out)
        return np.moveaxis(out, 0, 2)


class GaussianNoise(_Photometric):
    """Adds normal noise of `mean` and `std` (in units of 255) and clips to [0, 255], keeping
    the image's dtype."""

    def __init__(self, mean: Any = 0.0, std: Any = 1.0, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        noise = rng().normal(self.mean, self.std, image.shape) * 255
        return np.clip(image + noise.astype(np.float32), 0, 255).astype(image.dtype)


class _Jitter(_Photometric):
    """Blend the image with something (`_blend`) by a factor drawn uniformly from
    [max(0, 1 - value), 1 + value]; 0 leaves the image as it is and draws nothing."""

    def __init__(self, value: float, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.value = _strength(type(self).__name__, value)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if self.value == 0:
            return image
        pixels = image.astype(np.float32)
        alpha = rng().uniform(max(0, 1 - self.value), 1 + self.value)
        return self._blend(pixels, alpha).clip(0, 255).astype(image.dtype)

    def _blend(self, pixels: np.ndarray, alpha: float) -> np.ndarray:
        raise NotImplementedError


class BrightnessTransform(_Jitter):
    """Scales the pixel values by a random factor around 1 (`value` sets the spread)."""

    def _blend(self, pixels: np.ndarray, alpha: float) -> np.ndarray:
        return pixels * alpha


class ContrastTransform(_Jitter):
    """Blends the image with its mean gray level by a random factor around 1."""

    def _blend(self, pixels: np.ndarray, alpha: float) -> np.ndarray:
        # MegEngine's numpy took the float32 mean times a Python float in float64 and rounded
        # the sum's scalar back to float32: the same here, spelled out
        gray = float(F.to_gray(pixels).mean())
        return pixels * alpha + np.float32(gray * (1 - alpha))


class SaturationTransform(_Jitter):
    """Blends the image with its gray version by a random factor around 1."""

    def _blend(self, pixels: np.ndarray, alpha: float) -> np.ndarray:
        return pixels * alpha + F.to_gray(pixels) * (1 - alpha)


class HueTransform(_Photometric):
    """Rotates the hue by a random amount of up to `value` turns either way (`value` in
    [0, 0.5]); the image goes through uint8."""

    def __init__(self, value: float, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.value = _strength("HueTransform", value, high=0.5)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if self.value == 0:
            return image
        hsv = F.with_opencv("HueTransform", image.astype(np.uint8),
                            lambda im: cv2.cvtColor(im, cv2.COLOR_BGR2HSV_FULL))
        alpha = rng().uniform(-self.value, self.value)
        # the shift truncated toward zero, then taken mod 256 (as MegEngine's uint8 cast did),
        # and uint8 addition wraps the hue around the circle
        hsv[:, :, 0] += np.uint8(int(alpha * 255) % 256)
        return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR_FULL).astype(image.dtype)


class ColorJitter(VisionTransform):
    """Brightness, contrast, saturation and hue jitter (those not 0), in a new random order for
    every sample. Each strength is one number, as for the single transforms."""

    def __init__(self, brightness: float = 0, contrast: float = 0, saturation: float = 0,
                 hue: float = 0, *, order: Sequence[str] | None = None) -> None:
        parts = [kind(value) for kind, value in (
            (BrightnessTransform, brightness), (ContrastTransform, contrast),
            (SaturationTransform, saturation), (HueTransform, hue)) if value != 0]
        self.transforms = Compose(parts, shuffle_indices=[tuple(range(1, len(parts) + 1))],
                                  order=order)
        super().__init__(order)

    def _order_changed(self) -> None:
        if "transforms" in self.__dict__:
            self.transforms.order = self.order

    def apply(self, input: Any) -> Any:
        return self.transforms.apply(input)


class Lighting(_Photometric):
    """AlexNet's PCA lighting noise: adds a random mix of the principal colour components of
    ImageNet, weighted by normal draws of standard deviation `scale` (in units of 255)."""

    # ImageNet's RGB colour covariance eigenvectors (columns) with their rows in BGR order, and
    # the eigenvalues
    eigvec = np.array([[-0.5836, -0.6948, 0.4203],
                       [-0.5808, -0.0045, -0.8140],
                       [-0.5675, 0.7192, 0.4009]])
    eigval = np.array([0.2175, 0.0188, 0.0045])

    def __init__(self, scale: float, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.scale = _strength("Lighting", scale)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if self.scale == 0:
            return image
        alpha = rng().normal(scale=self.scale * 255, size=3)
        shifted = image.astype(np.float32) + self.eigvec.dot(alpha * self.eigval)
        return shifted.clip(0, 255).astype(image.dtype)
