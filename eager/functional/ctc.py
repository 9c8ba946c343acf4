"""MegEngine's CTC loss (`F.nn.ctc_loss`, re-exported by nn.py with every other flat name).

In eager code the lengths and labels are read on the host and checked (MegEngine asserts the
same); inside a region (`partial_trace`, `xla_trace`) they are abstract and nothing is checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import current
from ..errors import OpTypeError
from ..index_checks import check_range, host_values
from ..op_errors import bad_argument
from ..ops import OPS
from ..tensors import Tensor, apply
from .shape import _t

_REDUCTIONS = ("mean", "sum", "none")


def ctc_loss(pred: Any, pred_lengths: Any, label: Any, label_lengths: Any, blank: int = 0,
             reduction: str = "mean") -> Tensor:
    """The connectionist temporal classification loss of `pred` (T, N, C), which holds
    *probabilities* (softmax outputs, not log-probabilities), as MegEngine defines it.

    Sample n uses the first `pred_lengths[n]` frames and the label `label[n, :label_lengths[n]]`
    of an (N, S) `label`, or its part of a 1-d `label` that concatenates them all; labels do not
    contain `blank`. The loss of a sample is -log of the total probability of its alignments;
    "mean" averages loss / label_length over the batch, "sum" adds the losses, "none" gives
    the N losses.
    """
    pred, pred_lengths, label, label_lengths = (
        _t(v) for v in (pred, pred_lengths, label, label_lengths))
    if reduction not in _REDUCTIONS:
        raise bad_argument(f"ctc_loss: reduction must be one of {_REDUCTIONS}, got "
                           f"{reduction!r}.")
    _check_shapes(pred, pred_lengths, label, label_lengths, int(blank))
    width = label.shape[-1] if label.ndim == 2 else label.size
    if current() is None:
        width = _check_values(pred, pred_lengths, label, label_lengths)
    return apply(OPS["ctc_loss"], pred, pred_lengths, label, label_lengths, blank=int(blank),
                 width=int(width), reduction=reduction)


def _check_shapes(pred: Tensor, pred_lengths: Tensor, label: Tensor, label_lengths: Tensor,
                  blank: int) -> None:
    if pred.ndim != 3 or np.dtype(pred.dtype).kind not in "fV":
        raise bad_argument(f"ctc_loss: pred must be a float (T, N, C) tensor of probabilities, "
                           f"got shape {pred.shape} dtype {np.dtype(pred.dtype)}.")
    _, n, c = pred.shape
    for value, name in ((pred_lengths, "pred_lengths"), (label_lengths, "label_lengths"),
                        (label, "label")):
        if np.dtype(value.dtype).kind not in "iu":
            raise bad_argument(f"ctc_loss: {name} must hold integers, got dtype "
                               f"{np.dtype(value.dtype)}; convert it with .astype('int32').",
                               OpTypeError)
    for value, name in ((pred_lengths, "pred_lengths"), (label_lengths, "label_lengths")):
        if value.ndim != 1 or value.shape[0] != n:
            raise bad_argument(f"ctc_loss: {name} must have shape ({n},), one length per "
                               f"sample of pred {pred.shape}; got {value.shape}.")
    if not (label.ndim == 1 or (label.ndim == 2 and label.shape[0] == n)):
        raise bad_argument(f"ctc_loss: label must be (N, S) with N = {n}, or 1-d (the labels "
                           f"concatenated); got shape {label.shape}.")
    if not 0 <= blank < c:
        raise bad_argument(f"ctc_loss: blank={blank} must be a class of pred {pred.shape}, "
                           f"in [0, {c}).")


def _check_values(pred: Tensor, pred_lengths: Tensor, label: Tensor,
                  label_lengths: Tensor) -> int:
    """Check lengths and labels on the host; return the width of the widest label."""
    t, _, c = pred.shape
    frames, lengths = host_values(pred_lengths), host_values(label_lengths)
    if frames.size and (frames.min() < 1 or frames.max() > t):
        raise bad_argument(f"ctc_loss: pred_lengths must lie in [1, {t}] (pred has {t} "
                           f"frames), got {frames.tolist()}.")
    widest = int(label.shape[1]) if label.ndim == 2 else int(lengths.max(initial=0))
    if lengths.size and (lengths.min() < 1 or lengths.max() > widest):
        raise bad_argument(f"ctc_loss: label_lengths must lie in [1, {widest}] for a label "
                           f"of shape {label.shape}, got {lengths.tolist()}.")
    symbols = host_values(label)
    if label.ndim == 1:
        if symbols.size != lengths.sum():
            raise bad_argument(f"ctc_loss: a 1-d label holds the labels concatenated, so its "
                               f"size {symbols.size} must be sum(label_lengths) = "
                               f"{int(lengths.sum())}.")
    else:
        symbols = symbols[np.arange(symbols.shape[1]) < lengths[:, None]]
    check_range("ctc_loss", symbols, c, "label", size=f"{c} classes (pred {pred.shape})")
    return max(widest, 1)


__all__ = ["ctc_loss"]
