"""Deformable functions of MegEngine's `F.nn`: deformable convolution and deformable PS RoI
pooling, with MegEngine 1.13's signatures and rules (nn.py imports them).

Both compute in float32, as MegEngine does. The input, weight, offsets, mask and bias of the
convolution get gradients; in the pooling the input and the offsets `trans` do, the RoIs not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import OpTypeError
from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.ops.deformable import trans_rank
from ..core.tensors import Tensor, apply
from ._args import _ints, _t
from ._conv import grouped_weight
from ._detection import _boxes

_COMPUTE_MODES = ("default", "float32")


def _f32(t: Tensor) -> Tensor:
    return t if t.dtype == np.float32 else t.astype(np.float32)


def deformable_conv2d(inp: Any, weight: Any, offset: Any, mask: Any, bias: Any = None,
                      stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                      conv_mode: str = "cross_correlation",
                      compute_mode: str = "default") -> Tensor:
    """Deformable convolution (DCNv2): a 2-d convolution of NCHW `inp` whose kernel taps sample
    the input bilinearly at learned offsets from their places, each sample scaled by a mask.

    Args:
        inp: (N, C, H, W) features.
        weight: (O, C / groups, kh, kw), or MegEngine's grouped (groups, O / groups,
            C / groups, kh, kw).
        offset: (N, 2 * dg * kh * kw, OH, OW): per deformable group (dg of them, splitting
            the C channels evenly) and kernel tap (row-major), the (dy, dx) of its sample at
            each output position; OH, OW are the convolution's output size.
        mask: (N, dg * kh * kw, OH, OW): what each sample is multiplied by.
        bias: None, or O values ((1, O, 1, 1) as MegEngine stores it, or (O,)).
        stride, padding, dilation: ints or (h, w) pairs, as `conv2d`'s; the padding is zeros.
        groups: the convolution's channel groups.
        conv_mode: "cross_correlation" (MegEngine's only mode).
        compute_mode: "default" or "float32"; either computes in float32.

    Returns:
        (N, O, OH, OW) float32. A sample's neighbours outside the image count as 0.

    >>> import eager as eg, eager.functional as F
    >>> x, w = eg.ones((1, 1, 3, 3)), eg.ones((1, 1, 2, 2))
    >>> shift = eg.tensor([0.0, 0.5] * 4).reshape(1, 8, 1, 1)  # every tap half a pixel right
    >>> F.deformable_conv2d(x, w, shift, eg.ones((1, 4, 1, 1)), stride=2).numpy().tolist()
    [[[[4.0]]]]
    """
    if not isinstance(conv_mode, str) or conv_mode.lower() != "cross_correlation":
        raise bad_argument(f"deformable_conv2d: conv_mode must be 'cross_correlation', got "
                           f"{conv_mode!r:.60}.")
    if compute_mode not in _COMPUTE_MODES:
        raise bad_argument(f"deformable_conv2d: compute_mode must be one of {_COMPUTE_MODES}, "
                           f"got {compute_mode!r:.60}.")
    x, weight, offset, mask = _t(inp), _t(weight), _t(offset), _t(mask)
    groups = _ints("deformable_conv2d", "groups", groups, 1)[0]
    weight = grouped_weight("deformable_conv2d", weight, groups, 2)
    attrs = {"stride": _ints("deformable_conv2d", "stride", stride, 2),
             "padding": _ints("deformable_conv2d", "padding", padding, 2),
             "dilation": _ints("deformable_conv2d", "dilation", dilation, 2), "groups": groups}
    bias = None if bias is None else _t(bias)
    require("deformable_conv2d", x, weight, offset, mask, bias, **attrs)
    return apply(OPS["deformable_conv2d"], _f32(x), _f32(weight), _f32(offset), _f32(mask),
                 None if bias is None else _f32(bias), **attrs)


def deformable_psroi_pooling(inp: Any, rois: Any, trans: Any, no_trans: bool, part_size: int,
                             pooled_h: int, pooled_w: int, sample_per_part: int,
                             spatial_scale: float, trans_std: float = 0.1) -> Tensor:
    """Deformable PS RoI pooling (Deformable R-FCN): (K, C, pooled_h, pooled_w) features of the
    K RoIs of `rois` over NCHW `inp`, each bin the mean of sample_per_part x sample_per_part
    bilinear samples, the bins shifted by learned offsets `trans`.

    Args:
        inp: (N, C, H, W) features (output channel c pools input channel c).
        rois: (K, 5), rows (batch index, x0, y0, x1, y1); the corners are rounded (halves away
            from zero) and scaled by `spatial_scale`, the RoI covering both corner pixels.
        trans: (K, 2, pooled_h, pooled_w): per RoI the (dx, dy) of each part, in units of the
            RoI's width and height times `trans_std`; bin (i, j) moves by part
            (floor(i * part_size / pooled_h), floor(j * part_size / pooled_w)). With
            `no_trans` it is not read (any 4-d tensor) and gets no gradient.
        no_trans: pool without offsets.
        part_size: the parts along each axis, 1 to min(pooled_h, pooled_w).
        pooled_h, pooled_w: the bins along y and x.
        sample_per_part: samples per bin along each axis, at least 1.
        spatial_scale: multiplies the RoIs' corners (e.g. 1 / 16 for a stride-16 map).
        trans_std: multiplies `trans`.

    Returns:
        (K, C, pooled_h, pooled_w) float32: samples past half a pixel outside the image are
        left out of a bin's mean (a bin with none is 0), the others clamped into it.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    >>> rois, trans = eg.tensor([[0.0, 0.0, 0.0, 1.0, 1.0]]), eg.zeros((1, 2, 1, 1))
    >>> F.deformable_psroi_pooling(x, rois, trans, False, 1, 1, 1, 2, 1.0).numpy().tolist()
    [[[[0.75]]]]
    """
    fn = "deformable_psroi_pooling"
    x, boxes, offsets = _t(inp), _t(rois), _t(trans)
    pooled = (_ints(fn, "pooled_h", pooled_h, 1)[0], _ints(fn, "pooled_w", pooled_w, 1)[0])
    samples = _ints(fn, "sample_per_part", sample_per_part, 1)[0]
    part = _ints(fn, "part_size", part_size, 1)[0]
    if not isinstance(no_trans, (bool, np.bool_)):
        raise bad_argument(f"{fn}: no_trans must be True or False, got {no_trans!r:.60}.",
                           OpTypeError)
    require(fn, x, boxes, None if no_trans else offsets, pooled=pooled, part_size=part,
            samples=samples)
    # unread without offsets, but MegEngine's signature still takes a 4-d tensor there
    if no_trans and (found := trans_rank(offsets)) is not None:
        raise bad_argument(f"{fn}: {found[1]}")
    return apply(OPS[fn], _f32(x), _boxes(boxes),
                 None if no_trans else _f32(offsets), pooled=pooled, part_size=part,
                 samples=samples, spatial_scale=number(spatial_scale, "spatial_scale"),
                 trans_std=number(trans_std, "trans_std"))


__all__ = ["deformable_conv2d", "deformable_psroi_pooling"]
