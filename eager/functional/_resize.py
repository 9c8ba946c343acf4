"""Resizing images: `interpolate` (MegEngine's `F.vision`, which vision.py re-exports) and
`pixel_shuffle` (MegEngine's `F.nn`, which nn.py imports)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _ints, _pair, _t

_INTERPOLATE_MODES = ("nearest", "bilinear")


def interpolate(x: Any, size: int | Sequence[int] | None = None,
                scale_factor: float | Sequence[float] | None = None, mode: str = "bilinear",
                align_corners: bool | None = None) -> Tensor:
    """Resize NCHW `x` to `size` (an int or (h, w)) or by `scale_factor` (floor(h * s) rows).
    `mode` is "nearest" or "bilinear", in either case (MegEngine's).

    "nearest" takes source row floor(i * h_in / h_out); "bilinear" mixes the two nearest rows
    and columns, with the corner pixels' centres aligned when `align_corners=True`, their outer
    edges when False (the default). Both match PyTorch given `size`; given `scale_factor`, the
    source positions use h_in / h_out, as MegEngine does (PyTorch's `recompute_scale_factor=True`).
    """
    x = x if isinstance(x, Tensor) else Tensor(x)
    mode = mode.lower() if isinstance(mode, str) else mode  # MegEngine takes "BILINEAR" too
    if mode not in _INTERPOLATE_MODES:
        raise bad_argument(f"interpolate: mode must be one of {_INTERPOLATE_MODES}, got "
                           f"{mode!r}.")
    if mode == "nearest" and align_corners is not None:
        raise bad_argument("interpolate: align_corners applies to mode='bilinear' only; "
                           "leave it None for mode='nearest'.")
    require("interpolate", x, mode=mode)
    return apply(OPS["interpolate"], x, size=_out_size(x.shape[2:], size, scale_factor),
                 mode=mode, align_corners=bool(align_corners))


def _out_size(shape: tuple[int, ...], size: Any, scale_factor: Any) -> tuple[int, int]:
    if (size is None) == (scale_factor is None):
        raise bad_argument("interpolate: give exactly one of size and scale_factor, got "
                           f"size={size!r}, scale_factor={scale_factor!r}.")
    if size is not None:
        out = _pair(size)
    else:
        scales = (scale_factor,) * 2 if np.isscalar(scale_factor) else tuple(scale_factor)
        out = tuple(int(math.floor(n * number(s, "scale_factor"))) for n, s in zip(shape, scales))
    if len(out) != 2 or min(out) < 1:
        raise bad_argument(f"interpolate: the output size must be two positive ints, got "
                           f"{out} (size={size!r}, scale_factor={scale_factor!r}).")
    return out


def pixel_shuffle(x: Any, upscale_factor: int) -> Tensor:
    """Rearrange (..., C * r * r, H, W) into (..., C, H * r, W * r), r = `upscale_factor`:
    each group of r * r channels becomes an r x r block of pixels (PyTorch's order)."""
    x = _t(x)
    r = _ints("pixel_shuffle", "upscale_factor", upscale_factor, 1)[0]
    require("pixel_shuffle", x, factor=r)
    return apply(OPS["pixel_shuffle"], x, factor=r)
