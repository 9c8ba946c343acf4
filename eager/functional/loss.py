"""Loss functions (MegEngine signatures and defaults). `reduction` is "mean", "sum" or "none"."""

from __future__ import annotations

from typing import Any

from ..ops import OPS
from ..tensor import Tensor, apply

_REDUCTIONS = ("mean", "sum", "none")


def _check(reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    return reduction


def cross_entropy(pred: Any, label: Any, axis: int = 1, with_logits: bool = True,
                  label_smooth: float = 0.0, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy between logits `pred` and integer class `label` along `axis`.

    With `label_smooth = s` the target puts 1 - s on the label and s spread evenly over all
    classes. `with_logits=False` takes probabilities instead of logits.
    """
    return apply(OPS["cross_entropy"], pred, label, axis=int(axis), with_logits=bool(with_logits),
                 label_smooth=float(label_smooth), reduction=_check(reduction))


def nll_loss(pred: Any, label: Any, axis: int = 1, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of integer `label` given log-probabilities `pred`."""
    return apply(OPS["nll_loss"], pred, label, axis=int(axis), reduction=_check(reduction))


def binary_cross_entropy(pred: Any, label: Any, with_logits: bool = True,
                         reduction: str = "mean") -> Tensor:
    """Binary cross-entropy; `pred` are logits unless `with_logits=False` (MegEngine default)."""
    return apply(OPS["binary_cross_entropy"], pred, label, with_logits=bool(with_logits),
                 reduction=_check(reduction))


def mse_loss(pred: Any, label: Any, reduction: str = "mean") -> Tensor:
    """Mean squared error."""
    return apply(OPS["mse_loss"], pred, label, reduction=_check(reduction))


def l1_loss(pred: Any, label: Any, reduction: str = "mean") -> Tensor:
    """Mean absolute error."""
    return apply(OPS["l1_loss"], pred, label, reduction=_check(reduction))


square_loss = mse_loss

__all__ = ["cross_entropy", "nll_loss", "binary_cross_entropy", "mse_loss", "l1_loss",
           "square_loss"]
