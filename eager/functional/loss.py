"""Loss functions (MegEngine signatures and defaults). `reduction` is "mean", "sum" or "none".

Class labels given to `cross_entropy` and `nll_loss` are checked in eager code: one outside
[0, C) raises `IndexError`, where the gather would otherwise give nan (or, for -C..-1, silently
pick a class counted from the end). Float labels holding whole numbers (MegEngine code often
passes them) are taken as int32; a fractional one raises, where MegEngine truncates it.
`ctc_loss` reads its lengths and labels on the host in eager code and checks them too (MegEngine
asserts the same); inside a region (`partial_trace`, `xla_trace`) nothing is checked.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.context import current
from ..core.index_checks import check_range, host_values
from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _t

_REDUCTIONS = ("mean", "sum", "none")


def _check(reduction: str, fn: str = "loss", allowed: tuple[str, ...] = _REDUCTIONS) -> str:
    if reduction not in allowed:
        raise bad_argument(f"{fn}: reduction must be one of {allowed}, got {reduction!r}.")
    return reduction


def _int_labels(fn: str, label: Any) -> Any:
    """`label` as int32 when it holds floats (MegEngine accepts float class labels). In eager
    code a fractional label raises OpArgumentError; in a capture the values are abstract and
    the cast truncates, as MegEngine does."""
    dtype = getattr(label, "dtype", None)
    if dtype is None:  # a list or a number (numpy 2.5's result_type reads a list as a dtype)
        label = np.asarray(label)
        dtype = label.dtype
    if np.dtype(dtype).kind != "f":
        return label
    if current() is None:
        host = host_values(label)
        bad = host[host != np.trunc(host)]
        if bad.size:
            raise bad_argument(f"{fn}: class labels must be whole numbers; a float label holds "
                               f"{float(bad.flat[0])}. Pass integer labels (.astype('int32')).")
    return label.astype("int32") if isinstance(label, Tensor) else np.asarray(label, "int32")


def _labels_in_range(fn: str, pred: Any, label: Any, axis: int) -> int:
    """Raise the op's error for an axis that is not pred's, then OpIndexError if an integer
    class label lies outside [0, C), C = pred.shape[axis]; return `axis`. The labels' values
    are checked in eager code only: while a region is captured they are abstract.

    The labels are read on the host, not reduced on the device together with the loss: labels
    that came from numpy cost a numpy min/max, and a device array is read once (jax keeps the
    host copy), so the check never waits for the loss computation itself.
    """
    require(fn, pred, label, axis=axis)
    shape = tuple(pred.shape) if hasattr(pred, "shape") else np.shape(pred)
    n = shape[axis]
    check_range(fn, label, n, "class label",
                size=f"{n} classes (axis {axis} of pred, shape {shape})")
    return axis


def cross_entropy(pred: Any, label: Any, axis: int = 1, with_logits: bool = True,
                  label_smooth: float = 0.0, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy between logits `pred` and integer class `label` along `axis`
    (float labels holding whole numbers are accepted, as in MegEngine).

    With `label_smooth = s` the target puts 1 - s on the label and s spread evenly over all
    classes. `with_logits=False` takes probabilities instead of logits.

    A label outside [0, C) raises `IndexError` in eager code. Inside a compiled region
    (`partial_trace`, `xla_trace`) nothing is checked: a label in [-C, -1] picks class C + label,
    as Python indexing does, and any other one makes that sample's loss nan (so a "mean" or
    "sum" is nan) while its gradient through the label term is 0: without label smoothing that
    sample's logits get a zero gradient, so training goes on silently apart from the nan loss.
    """
    label = _int_labels("cross_entropy", label)
    axis = _labels_in_range("cross_entropy", pred, label, int(axis))
    return apply(OPS["cross_entropy"], pred, label, axis=axis, with_logits=bool(with_logits),
                 label_smooth=number(label_smooth, "label_smooth"),
                 reduction=_check(reduction, "cross_entropy"))


def nll_loss(pred: Any, label: Any, axis: int = 1, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of integer `label` given log-probabilities `pred`.

    Out-of-range labels: as for `cross_entropy` (`IndexError` in eager code; in a compiled
    region a label in [-C, -1] counts from the end and any other one gives nan).
    """
    label = _int_labels("nll_loss", label)
    axis = _labels_in_range("nll_loss", pred, label, int(axis))
    return apply(OPS["nll_loss"], pred, label, axis=axis,
                 reduction=_check(reduction, "nll_loss"))


def binary_cross_entropy(pred: Any, label: Any, with_logits: bool = True,
                         reduction: str = "mean") -> Tensor:
    """Binary cross-entropy; `pred` are logits unless `with_logits=False` (MegEngine default)."""
    return apply(OPS["binary_cross_entropy"], pred, label, with_logits=bool(with_logits),
                 reduction=_check(reduction, "binary_cross_entropy"))


def mse_loss(pred: Any, label: Any, reduction: str = "mean") -> Tensor:
    """Mean squared error."""
    return apply(OPS["mse_loss"], pred, label, reduction=_check(reduction, "mse_loss"))


def l1_loss(pred: Any, label: Any, reduction: str = "mean") -> Tensor:
    """Mean absolute error."""
    return apply(OPS["l1_loss"], pred, label, reduction=_check(reduction, "l1_loss"))


square_loss = mse_loss  # MegEngine's name for the mean squared error


def smooth_l1_loss(pred: Any, label: Any, beta: float = 1.0, reduction: str = "mean") -> Tensor:
    """The Huber-like loss of PyTorch: 0.5 * d**2 / beta where |d| < beta, else |d| - beta / 2,
    d = pred - label; `beta=0` gives the L1 loss.

    >>> import eager as eg, eager.functional as F
    >>> F.smooth_l1_loss(eg.tensor([0.5, 3.0]), eg.tensor([0.0, 0.0]), reduction="none").numpy()
    array([0.125, 2.5  ], dtype=float32)
    """
    require("smooth_l1_loss", pred, label, beta=beta)  # as given, for the message
    return apply(OPS["smooth_l1_loss"], pred, label, beta=number(beta, "beta"),
                 reduction=_check(reduction, "smooth_l1_loss"))


def hinge_loss(pred: Any, label: Any, norm: str = "L1", reduction: str = "mean") -> Tensor:
    """MegEngine's SVM hinge loss for `pred` and `label` of shape (N, C), labels in {-1, 1}:
    per sample, the sum over axis 1 of max(0, 1 - pred * label) ("L1") or of its square
    ("L2"); `reduction` then acts on those N values.

    >>> import eager as eg, eager.functional as F
    >>> pred = eg.tensor([[0.5, -0.5, 0.1], [-0.6, 0.7, 0.8]])
    >>> label = eg.tensor([[1, -1, -1], [-1, 1, 1]])
    >>> round(F.hinge_loss(pred, label).item(), 4)
    1.5
    """
    kind = str(norm).upper()
    if kind not in ("L1", "L2"):
        raise bad_argument(f"hinge_loss: norm must be 'L1' or 'L2', got {norm!r}.")
    require("hinge_loss", pred, label)
    return apply(OPS["hinge_loss"], pred, label, squared=kind == "L2",
                 reduction=_check(reduction, "hinge_loss"))


def kl_div(pred: Any, label: Any, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Kullback-Leibler divergence KL(label || exp(pred)) with PyTorch's semantics: `pred` holds
    log-probabilities, `label` probabilities (log-probabilities if `log_target`). The pointwise
    terms label * (log(label) - pred) are averaged over every element by "mean"; "batchmean"
    divides their sum by the batch size (axis 0), which is the KL divergence per sample.
    """
    reduction = _check(reduction, "kl_div", _REDUCTIONS + ("batchmean",))
    return apply(OPS["kl_div"], pred, label, log_target=bool(log_target), reduction=reduction)


# ----- connectionist temporal classification ------------------------------------------------------
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
    _check(reduction, "ctc_loss")
    require("ctc_loss", pred, pred_lengths, label, label_lengths, blank=int(blank))
    width = label.shape[-1] if label.ndim == 2 else label.size
    if current() is None:
        width = _check_values(pred, pred_lengths, label, label_lengths)
    return apply(OPS["ctc_loss"], pred, pred_lengths, label, label_lengths, blank=int(blank),
                 width=int(width), reduction=reduction)


def _check_values(pred: Tensor, pred_lengths: Tensor, label: Tensor,
                  label_lengths: Tensor) -> int:
    """Check lengths and labels on the host; return the width of the widest label.

    Not the op's check: it reads the values, which a region has only as abstract arrays (a
    check there would end the region or read nothing), and the width it returns is the op's
    static attribute, which a 1-d label's values decide."""
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


__all__ = ["cross_entropy", "nll_loss", "binary_cross_entropy", "mse_loss", "l1_loss",
           "square_loss", "smooth_l1_loss", "hinge_loss", "kl_div", "ctc_loss"]
