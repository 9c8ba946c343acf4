"""Losses beyond the classification ones in nn.py: smooth L1, hinge and KL divergence.

`reduction` is a static attribute: "mean", "sum" or "none", and for `kl_div` also "batchmean"
(the sum divided by the size of axis 0: the true KL divergence per sample, as PyTorch defines it).
"""

from collections.abc import Sequence

import jax.numpy as jnp
from jax.scipy import special

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from .checks import Found, dims
from .ragged_rules import unless_reduced
from .registry import defop


def _reduce(loss, reduction):
    if reduction == "mean":
        return jnp.mean(loss)
    if reduction == "sum":
        return jnp.sum(loss)
    if reduction == "batchmean":
        return jnp.sum(loss) / (loss.shape[0] if loss.ndim else 1)
    return loss


def _beta_check(inputs: Sequence, attrs: dict) -> Found:
    """A threshold between the pieces: a negative one would make neither of them apply."""
    beta = attrs["beta"]
    return None if beta >= 0 else (OpArgumentError, f"beta must be >= 0, got {beta}.")


@defop("smooth_l1_loss", ragged=unless_reduced, amp=FLOAT32, before=_beta_check)
def smooth_l1_loss(pred, label, *, beta, reduction):
    """Quadratic (0.5 d^2 / beta) below |d| = beta, linear (|d| - beta / 2) above; beta = 0 is
    the L1 loss (the quadratic piece would divide by zero)."""
    d = jnp.abs(pred - label)
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def _hinge_check(inputs: Sequence, attrs: dict) -> Found:
    """Samples of classes, (N, C): the loss sums over axis 1."""
    ndim = len(dims(inputs[0]))
    if ndim < 2:
        return OpArgumentError, (f"pred must have shape (N, C), got {ndim} axes; reshape a single "
                                 "sample to (1, C).")
    return None


@defop("hinge_loss", ragged=unless_reduced, amp=FLOAT32, check=_hinge_check,
       before=_hinge_check)
def hinge_loss(pred, label, *, squared, reduction):
    """max(0, 1 - pred * label) (squared for the L2 form) summed over axis 1, the class axis of
    MegEngine's (N, C) inputs: one loss per sample, which `reduction` then reduces."""
    margin = 1 - pred * label
    # where, not maximum: the gradient at margin 0 is 0, as MegEngine's relu gives
    loss = jnp.where(margin > 0, margin, jnp.zeros_like(margin))
    if squared:
        loss = loss * loss
    return _reduce(jnp.sum(loss, axis=1), reduction)


@defop("kl_div", ragged=unless_reduced, amp=FLOAT32)
def kl_div(pred, label, *, log_target, reduction):
    """label * (log(label) - pred) with `pred` log-probabilities (PyTorch's argument order);
    `label` is a log-probability too when `log_target`. A zero label contributes 0."""
    if log_target:
        loss = jnp.exp(label) * (label - pred)
    else:
        loss = special.xlogy(label, label) - label * pred
    return _reduce(loss, reduction)
