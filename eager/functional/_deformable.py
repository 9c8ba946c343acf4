"""Deformable functions of MegEngine's `F.nn`: deformable convolution and deformable PS RoI
pooling, with MegEngine 1.13's signatures and rules (nn.py imports them).

Both compute in float32, as MegEngine does. The input, weight, offsets, mask and bias of the
convolution get gradients; in the pooling the input and the offsets `trans` do, the RoIs not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import OpTypeError
from ..core.op_errors import bad_argument, number
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _float_input, _ints, _t
from ._conv import grouped_weight
from ._detection import _real, _rois

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
    _check_conv(x, weight, attrs)
    _check_deformation(x, weight, offset, mask, _out_size(x, weight, attrs))
    if bias is not None:
        bias = _t(bias)
        _check_bias(bias, weight.shape[0])
        bias = _f32(bias)
    return apply(OPS["deformable_conv2d"], _f32(x), _f32(weight), _f32(offset), _f32(mask),
                 bias, **attrs)


def _check_conv(x: Tensor, weight: Tensor, attrs: dict) -> None:
    if x.ndim != 4 or weight.ndim != 4:
        raise bad_argument(f"deformable_conv2d: needs an NCHW (4-d) input and an (O, C / groups, "
                           f"kh, kw) weight, got shapes {x.shape} and {weight.shape}.")
    _float_input("deformable_conv2d", x)
    _float_input("deformable_conv2d", weight, "weight")
    groups = attrs["groups"]
    if groups < 1 or weight.shape[0] % groups or x.shape[1] != weight.shape[1] * groups:
        raise bad_argument(f"deformable_conv2d: the input of shape {x.shape} has {x.shape[1]} "
                           f"channels; the weight of shape {weight.shape} with groups={groups} "
                           f"needs {weight.shape[1] * groups} and O divisible by groups.")
    if min(attrs["stride"] + attrs["dilation"]) < 1 or min(attrs["padding"]) < 0:
        raise bad_argument(f"deformable_conv2d: stride and dilation must be >= 1 and padding "
                           f">= 0, got stride={attrs['stride']}, padding={attrs['padding']}, "
                           f"dilation={attrs['dilation']}.")


def _out_size(x: Tensor, weight: Tensor, attrs: dict) -> tuple[int, int]:
    """(OH, OW) of the convolution; at least 1 each."""
    size = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, p, d in zip(
        x.shape[2:], weight.shape[2:], attrs["stride"], attrs["padding"], attrs["dilation"]))
    if min(size) < 1:
        raise bad_argument(f"deformable_conv2d: the dilated kernel {weight.shape[2:]} "
                           f"(dilation={attrs['dilation']}) is larger than the padded input "
                           f"{x.shape[2:]} (padding={attrs['padding']}): no output position.")
    return size[0], size[1]


def _check_deformation(x: Tensor, weight: Tensor, offset: Tensor, mask: Tensor,
                       out: tuple[int, int]) -> None:
    """offset (N, 2 * dg * taps, OH, OW) and mask (N, dg * taps, OH, OW), dg dividing C."""
    taps = weight.shape[2] * weight.shape[3]
    n, c = x.shape[:2]
    dg = mask.shape[1] // taps if mask.ndim == 4 else 0
    want = ((n, 2 * dg * taps, *out), (n, dg * taps, *out))
    if (dg < 1 or c % dg or mask.shape[1] % taps or (offset.shape, mask.shape) != want):
        raise bad_argument(
            f"deformable_conv2d: offset and mask must have shapes (N, 2 * dg * kh * kw, OH, OW) "
            f"and (N, dg * kh * kw, OH, OW) for some number dg of deformable groups dividing "
            f"the {c} input channels; with the input {x.shape} and the weight {weight.shape} "
            f"that is (N, OH, OW) = {(n, *out)} and kh * kw = {taps}, got {offset.shape} and "
            f"{mask.shape}.")
    _real("deformable_conv2d", offset, "offset")
    _real("deformable_conv2d", mask, "mask")


def _check_bias(bias: Tensor, out_channels: int) -> None:
    if bias.size != out_channels or (bias.ndim != 1 and bias.shape != (1, out_channels, 1, 1)):
        raise bad_argument(f"deformable_conv2d: bias must have shape (1, {out_channels}, 1, 1) "
                           f"or ({out_channels},), one value per output channel; got shape "
                           f"{bias.shape}.")
    _float_input("deformable_conv2d", bias, "bias")


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
    x = _t(inp)
    boxes = _rois(fn, x, rois)
    _float_input(fn, x)
    pooled = (_ints(fn, "pooled_h", pooled_h, 1)[0], _ints(fn, "pooled_w", pooled_w, 1)[0])
    samples = _ints(fn, "sample_per_part", sample_per_part, 1)[0]
    if min(pooled) < 1 or samples < 1:
        raise bad_argument(f"{fn}: pooled_h, pooled_w and sample_per_part must be >= 1, got "
                           f"{pooled[0]}, {pooled[1]} and {samples}.")
    part = _ints(fn, "part_size", part_size, 1)[0]
    offsets = _trans(_t(trans), no_trans, part, boxes.shape[0], pooled)
    return apply(OPS[fn], _f32(x), boxes, offsets, pooled=pooled, part_size=part,
                 samples=samples, spatial_scale=number(spatial_scale, "spatial_scale"),
                 trans_std=number(trans_std, "trans_std"))


def _trans(trans: Tensor, no_trans: Any, part: int, k: int,
           pooled: tuple[int, int]) -> Tensor | None:
    """The float32 offsets, or None with `no_trans`; checked against MegEngine's layout."""
    fn = "deformable_psroi_pooling"
    if not isinstance(no_trans, (bool, np.bool_)):
        raise bad_argument(f"{fn}: no_trans must be True or False, got {no_trans!r:.60}.",
                           OpTypeError)
    if trans.ndim != 4:
        raise bad_argument(f"{fn}: trans must be 4-d, (K, 2, pooled_h, pooled_w); got shape "
                           f"{trans.shape}.")
    if no_trans:
        return None
    if trans.shape != (k, 2, *pooled):
        raise bad_argument(f"{fn}: trans must have shape (K, 2, pooled_h, pooled_w) = "
                           f"{(k, 2, *pooled)} for {k} RoIs, got {trans.shape}.")
    if not 1 <= part <= min(pooled):
        raise bad_argument(f"{fn}: part_size must be between 1 and min(pooled_h, pooled_w) = "
                           f"{min(pooled)} (the parts index trans's last two axes), got {part}.")
    _real(fn, trans, "trans")
    return _f32(trans)


__all__ = ["deformable_conv2d", "deformable_psroi_pooling"]
