"""Detection functions of MegEngine's `F.vision` (vision.py re-exports them): RoI align, RoI
pooling and non-maximum suppression, with MegEngine 1.13's signatures and rules.

A RoI is a row (batch index, x0, y0, x1, y1) of a (K, 5) tensor; its batch index names an image
of the input (a value outside [0, N) reads an unspecified image). RoIs get no gradient, as in
MegEngine; the input does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import ragged as _ragged
from ..core import ragged_forms
from ..core.indexing import mask_indices
from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _ints, _t
from .tensor import _count

_MODES = ("average", "max")


def _mode(fn: str, mode: Any) -> str:
    if not isinstance(mode, str) or mode.lower() not in _MODES:
        raise bad_argument(f"{fn}: mode must be 'max' or 'average', got {mode!r:.60}.")
    return mode.lower()


def _boxes(rois: Tensor) -> Tensor:
    """The RoIs as float32, detached: they carry no gradient (the op's check has read them)."""
    return rois.detach().astype(np.float32)


def roi_align(inp: Any, rois: Any, output_shape: Any, mode: str = "average",
              spatial_scale: float = 1.0, sample_points: Any = 2,
              aligned: bool = True) -> Tensor:
    """RoI align (Mask R-CNN): (K, C, height, width) features of the K RoIs of `rois` over NCHW
    `inp`, each bin the average (or, mode="max", the maximum) of its bilinear samples.

    Args:
        inp: (N, C, H, W) features; computed in float32, as in MegEngine.
        rois: (K, 5), rows (batch index, x0, y0, x1, y1) in input coordinates.
        output_shape: (height, width) of the bins, or one int for both.
        mode: "average" or "max".
        spatial_scale: multiplies the RoIs' corners (e.g. 1 / 16 for a stride-16 map).
        sample_points: samples per bin along (y, x), or one int for both; at least 1.
        aligned: shift the scaled corners by -0.5 (pixel centres at integer coordinates).

    Returns:
        (K, C, height, width) float32; a sample's neighbours outside the image count as 0.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    >>> F.vision.roi_align(x, eg.tensor([[0.0, 0.5, 0.5, 1.5, 1.5]]), 1).numpy().tolist()
    [[[[1.5]]]]
    """
    x, boxes = _t(inp), _t(rois)
    shape = _ints("roi_align", "output_shape", output_shape, 2)
    samples = _ints("roi_align", "sample_points", sample_points, 2)
    require("roi_align", x, boxes, output_shape=shape, sample_points=samples)
    if x.dtype != np.float32:
        x = x.astype(np.float32)
    return apply(OPS["roi_align"], x, _boxes(boxes), output_shape=shape,
                 mode=_mode("roi_align", mode),
                 spatial_scale=number(spatial_scale, "spatial_scale"),
                 offset=0.5 if aligned else 0.0, sample_points=samples)


def roi_pooling(inp: Any, rois: Any, output_shape: Any, mode: str = "max",
                scale: float = 1.0) -> Tensor:
    """RoI pooling (Fast R-CNN): (K, C, height, width) features of the K RoIs of `rois` over
    NCHW `inp`, each bin the maximum (or, mode="average", the mean) of the pixels it covers.

    Args:
        inp: (N, C, H, W) float features.
        rois: (K, 5), rows (batch index, x0, y0, x1, y1) in input coordinates.
        output_shape: (height, width) of the bins, or one int for both.
        mode: "max" or "average".
        scale: multiplies the RoIs' corners, which are then rounded to pixels (halves away
            from zero); a RoI covers both corner pixels, at least one pixel.

    Returns:
        (K, C, height, width) in the input's dtype; a bin outside the image is 0.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    >>> F.vision.roi_pooling(x, eg.tensor([[0.0, 0.0, 0.0, 1.0, 1.0]]), 1).numpy().tolist()
    [[[[3.0]]]]
    """
    x, boxes = _t(inp), _t(rois)
    shape = _ints("roi_pooling", "output_shape", output_shape, 2)
    require("roi_pooling", x, boxes, output_shape=shape)
    return apply(OPS["roi_pooling"], x, _boxes(boxes), output_shape=shape,
                 mode=_mode("roi_pooling", mode), scale=number(scale, "scale"))


def nms(boxes: Any, scores: Any, iou_thresh: float, max_output: int | None = None) -> Tensor:
    """Non-maximum suppression: the int32 indices of the boxes kept, by descending score.

    Going down the boxes by score (equal scores: the later box first, as in MegEngine), a box
    is kept unless its IoU with a box already kept is above `iou_thresh`; at most `max_output`
    are kept (all that survive when None). The IoU is computed in float32.

    Args:
        boxes: (N, 4), rows (x0, y0, x1, y1).
        scores: (N,).
        iou_thresh: the IoU above which the lower-scored box is dropped.
        max_output: the most boxes to keep, >= 1; None: no limit.

    Returns:
        A 1-d int32 tensor of positions in `boxes`. Its length depends on the values: it is
        a selection like `x[mask]`'s (`eager/core/ragged.py`), so a `partial_trace` region can
        index with it and reduce, but not return it.

    >>> import eager as eg, eager.functional as F
    >>> boxes = eg.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 2.0, 1.9], [3.0, 3.0, 4.0, 4.0]])
    >>> F.vision.nms(boxes, eg.tensor([0.5, 0.9, 0.7]), iou_thresh=0.5).numpy().tolist()
    [1, 2]
    """
    boxes, scores = _t(boxes), _t(scores)
    require("nms_keep", boxes, scores)
    n = ragged_forms.storage_rows(boxes)  # ragged boxes: their capacity, whatever the count
    limit = n
    if max_output is not None:
        limit = _ints("nms", "max_output", max_output, 1)[0]
        # the option's own rule (None is no limit), not the op's: it takes 0 for no boxes
        if limit < 1:
            raise bad_argument(f"nms: max_output must be >= 1 (or None: no limit), got "
                               f"{limit}.")
    order, keep = apply(OPS["nms_keep"], boxes.detach(), scores.detach(),
                        iou_thresh=number(iou_thresh, "iou_thresh"), max_output=min(limit, n))
    return _kept(order, keep)


def _kept(order: Tensor, keep: Tensor) -> Tensor:
    """`order[keep]`: a count-sized selection, as `F.cond_take` makes one."""
    what = "F.nms() (its output size is the number of boxes kept)"
    if _ragged.enabled():
        (index,) = mask_indices(keep, what)
        return apply(OPS["getitem"], order, index, spec=("#",))
    return apply(OPS["cond_take"], keep, order, size=_count(keep, "F.nms()"))[0]


__all__ = ["roi_align", "roi_pooling", "nms"]
