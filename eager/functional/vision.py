"""MegEngine's `F.vision` namespace, for ported code (`F.vision.warp_perspective(x, m, (h, w))`):
the image functions this project has, which are also flat names of `eager.functional`.

Defined here: the geometric warps (remap, warp_affine, warp_perspective), colour conversion
(cvt_color) and FlowNet's correlation, with MegEngine 1.13's signatures and CPU rules (the ops
are in `eager/core/ops/warp.py`, `color.py` and `correlation.py`). Re-exported: interpolate and the
detection functions (roi_align, roi_pooling, nms).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.op_errors import number, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from . import _vision_args as spelled
from ._args import _ints, _t
from ._detection import nms, roi_align, roi_pooling
from ._resize import interpolate


def remap(inp: Any, map_xy: Any, border_mode: str = "replicate", scalar: float = 0.0,
          interp_mode: str = "linear") -> Tensor:
    """Move pixels: output pixel (y, x) of image n reads NCHW `inp` at the position
    `map_xy[n, y, x]`, given as (x, y) in input pixels.

    Args:
        inp: (N, C, H, W) float images.
        map_xy: (N, OH, OW, 2) positions, (column, row), in float32.
        border_mode: how a position past the edge reads: "replicate" (the edge pixel),
            "reflect", "reflect_101" (mirrored without repeating the edge), "wrap" or
            "constant" (`scalar`).
        scalar: the value outside the image with border_mode="constant".
        interp_mode: "linear" (bilinear between the four neighbours) or "nearest" (the
            position rounded, halves to even).

    Returns:
        (N, C, OH, OW) in inp's dtype. Gradients reach `inp` and (linear) `map_xy`.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    >>> F.vision.remap(x, eg.tensor([[[[0.5, 0.5], [1.0, 0.0]]]])).numpy().tolist()
    [[[[1.5, 1.0]]]]
    """
    fn = "remap"
    x, xy = _t(inp), _t(map_xy)
    require(fn, x, xy)
    return apply(OPS["remap"], x, _f32(xy), border=spelled.border(fn, border_mode),
                 border_val=number(scalar, "scalar"),
                 interp=spelled.choice(fn, "interp_mode", interp_mode, ("linear", "nearest")))


def _f32(t: Tensor) -> Tensor:
    return t if t.dtype == np.float32 else t.astype(np.float32)


def _warp_attrs(fn: str, out_shape: Any, border_mode: Any, border_val: Any,
                format: Any) -> dict[str, Any]:
    """A warp's attributes but its interpolation, which depends on the image (`_interp`)."""
    return {"out_shape": spelled.out_size(fn, out_shape), "format": spelled.layout(fn, format),
            "border": spelled.border(fn, border_mode),
            "border_val": number(border_val, "border_val")}


def _interp(fn: str, x: Tensor, interp_mode: Any, form: str) -> str:
    """The interpolation, once the op's check has found `x` a 4-d image of layout `form`."""
    channels = x.shape[3] if form == "NHWC" else x.shape[1]
    return spelled.interpolation(fn, interp_mode, form, channels)


def warp_affine(inp: Any, mat: Any, out_shape: Any, border_mode: str = "replicate",
                border_val: float = 0.0, format: str = "NHWC",
                interp_mode: str = "linear") -> Tensor:
    """Affine warp: output pixel (x, y) of image n reads `inp` at (m0 x + m1 y + m2,
    m3 x + m4 y + m5), m = mat[n] (a 2 x 3 matrix, row-major).

    As in MegEngine: an NHWC image of 1 to 3 channels goes through OpenCV's kernel (positions
    rounded to 1/32 pixel; interp_mode "linear", "nearest", "cubic" or "lanczos4"); any other
    is sampled bilinearly at the exact position.

    Args:
        inp: (N, H, W, C) float images, or (N, C, H, W) with format="NCHW".
        mat: (N, 2, 3) matrices, from output to input coordinates.
        out_shape: (height, width) of the output, or one int for both.
        border_mode: "replicate", "reflect", "reflect_101", "wrap" or "constant" (see
            `remap`).
        border_val: the value outside the image with border_mode="constant".
        format: "NHWC" (MegEngine's default here) or "NCHW".
        interp_mode: see above.

    Returns:
        The warped images in inp's layout and dtype. Gradients reach `inp` (MegEngine has
        none), and `mat` through the exact sampler.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[[0.0], [1.0]], [[2.0], [3.0]]]])  # NHWC, 2 x 2, one channel
    >>> shift = eg.tensor([[[1.0, 0.0, 0.5], [0.0, 1.0, 0.0]]])
    >>> F.vision.warp_affine(x, shift, (2, 1)).numpy().ravel().tolist()
    [0.5, 2.5]
    """
    fn = "warp_affine"
    x, m = _t(inp), _t(mat)
    attrs = _warp_attrs(fn, out_shape, border_mode, border_val, format)
    require(fn, x, m, **attrs)
    attrs["interp"] = _interp(fn, x, interp_mode, attrs["format"])
    return apply(OPS["warp_affine"], x, _f32(m), **attrs)


def warp_perspective(inp: Any, mat: Any, out_shape: Any, mat_idx: Any = None,
                     border_mode: str = "replicate", border_val: float = 0.0,
                     format: str = "NCHW", interp_mode: str = "linear") -> Tensor:
    """Perspective warp: output pixel (x, y) of output k reads image mat_idx[k] (k without
    `mat_idx`) at ((m0 x + m1 y + m2) / (m6 x + m7 y + m8), (m3 x + m4 y + m5) / (m6 x +
    m7 y + m8)), m = mat[k] (3 x 3, row-major: the inverse of OpenCV's warpPerspective's).

    As in MegEngine: an NHWC image of 1 to 3 channels goes through OpenCV's kernel (positions
    rounded to 1/32 pixel; interp_mode "linear", "nearest", "cubic" or "lanczos4"); any other
    is sampled bilinearly at the exact position, and with border_mode="constant" a
    non-finite result (a position at infinity) becomes `border_val`.

    Args:
        inp: (N, C, H, W) float images, or (N, H, W, C) with format="NHWC"; float16 is
            computed and returned in float32, as in MegEngine.
        mat: (K, 3, 3) matrices, from output to input coordinates; K = N without `mat_idx`.
        out_shape: (height, width) of the output, or one int for both.
        mat_idx: K image indices in [0, N): several matrices may warp one image.
        border_mode: "replicate", "reflect", "reflect_101", "wrap" or "constant" (see
            `remap`).
        border_val: the value outside the image with border_mode="constant".
        format: "NCHW" or "NHWC".
        interp_mode: see above.

    Returns:
        (K, C, height, width) (NHWC: (K, height, width, C)). Gradients reach `inp` and, through
        the exact sampler, `mat` (MegEngine: NCHW only).

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor(np.arange(9, dtype="float32").reshape(1, 1, 3, 3))
    >>> up_left = eg.tensor([[[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]])
    >>> F.vision.warp_perspective(x, up_left, (2, 2)).numpy().tolist()
    [[[[4.0, 5.0], [7.0, 8.0]]]]
    """
    fn = "warp_perspective"
    x, m = _t(inp), _t(mat)
    attrs = _warp_attrs(fn, out_shape, border_mode, border_val, format)
    index = None if mat_idx is None else spelled.image_indices(fn, mat_idx)
    require(fn, x, m, index, **attrs)
    if index is not None:
        index = spelled.in_batch(fn, index, x.shape[0])
    attrs["interp"] = _interp(fn, x, interp_mode, attrs["format"])
    return apply(OPS["warp_perspective"], _f32(x), _f32(m), index, **attrs)


def cvt_color(inp: Any, mode: str = "") -> Tensor:
    """Convert NHWC float images between colour spaces.

    Modes (either case): "RGB2GRAY" and "BGR2GRAY" (BT.601 luma, 0.299 R + 0.587 G +
    0.114 B), "RGBA2GRAY", "GRAY2RGB", "RGB2BGR", "BGR2RGB", "RGBA2RGB", "RGBA2BGR", and
    "RGB2YUV" / "YUV2RGB" (OpenCV's float YUV, chroma centred on 0.5). MegEngine 1.13's float
    kernels treat RGB2YUV's input and YUV2RGB's output as BGR; here RGB is RGB. The channel
    reorderings are MegEngine's uint8 modes, done here for floats; its uint8 YUV layouts
    (NV12, NV21, ...) are not supported.

    Args:
        inp: (N, H, W, C) float images, C as the mode reads (1, 3 or 4).
        mode: the conversion.

    Returns:
        (N, H, W, C') in inp's dtype, differentiable (MegEngine passes no gradient).

    >>> import eager as eg, eager.functional as F
    >>> rgb = eg.tensor([[[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]])
    >>> [round(v, 3) for v in F.vision.cvt_color(rgb, "RGB2GRAY").numpy().ravel().tolist()]
    [0.299, 0.114]
    """
    name, x = spelled.color_mode(mode), _t(inp)
    require("cvt_color", x, mode=name)
    return apply(OPS["cvt_color"], x, mode=name)


def correlation(data1: Any, data2: Any, kernel_size: int = 1, max_displacement: int = 1,
                stride1: int = 1, stride2: int = 1, pad_size: int = 0,
                is_multiply: bool = True) -> Tensor:
    """FlowNet's correlation of two NCHW feature maps: for each pixel and each displacement
    (dy, dx) (multiples of stride2 up to max_displacement), the mean over a k x k patch and the
    channels of data1 * data2 displaced (or of |data1 - data2|).

    Output pixel (y, x) centres its patch of data1 at (y * stride1 + b, x * stride1 + b) of
    the maps zero-padded by pad_size, b = max_displacement + kernel_size // 2; channel
    (dy / stride2 + r) * (2 r + 1) + dx / stride2 + r, r = max_displacement // stride2, holds
    displacement (dy, dx).

    Args:
        data1, data2: (N, C, H, W) float feature maps of one shape.
        kernel_size: the patch size, a positive odd int.
        max_displacement: the largest displacement compared, in pixels.
        stride1: the step between the output pixels' patch centres.
        stride2: the step between compared displacements.
        pad_size: zeros added on every side of both maps.
        is_multiply: compare by product (True) or by absolute difference.

    Returns:
        (N, (2 r + 1) ** 2, OH, OW) in data1's dtype, OH = ceil((H + 2 pad_size - 2 b) /
        stride1). Gradients reach both maps (MegEngine's for data1 are wrong: see
        `tests/parity/cases_warp.py`).

    >>> import eager as eg, eager.functional as F
    >>> a = eg.tensor(np.arange(9, dtype="float32").reshape(1, 1, 3, 3))
    >>> F.vision.correlation(a, a).numpy().ravel().tolist()  # the centre 4 times each neighbour
    [0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 24.0, 28.0, 32.0]
    """
    fn = "correlation"
    a, b = _t(data1), _t(data2)
    attrs = {k: _ints(fn, k, v, 1)[0] for k, v in (
        ("kernel_size", kernel_size), ("max_displacement", max_displacement),
        ("stride1", stride1), ("stride2", stride2), ("pad_size", pad_size))}
    require(fn, a, b, **attrs)
    return apply(OPS["correlation"], a, b, multiply=bool(is_multiply), **attrs)


__all__ = ["correlation", "cvt_color", "interpolate", "nms", "remap", "roi_align",
           "roi_pooling", "warp_affine", "warp_perspective"]
