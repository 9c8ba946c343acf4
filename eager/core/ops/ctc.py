"""The connectionist temporal classification (CTC) loss, MegEngine's definition: `pred` holds
probabilities (not log-probabilities), and its logarithm is floored at log(tiny) of the dtype.

The forward algorithm runs in log space over the label extended with blanks,
`blank l1 blank l2 ... blank`, for the whole batch at once (`lax.scan` over time). States no
path has reached yet hold log(tiny) rather than -inf, as in MegEngine: the loss of a label that
cannot fit in the frames is large but finite, and no gradient is nan.
"""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from .checks import Found, dims, integers, kind
from .registry import defop


def _padded(label, label_lengths, width, blank):
    """A 1-d concatenated label as an (N, width) one, padded with `blank`."""
    starts = jnp.cumsum(label_lengths) - label_lengths
    j = jnp.arange(width)
    index = starts[:, None] + j[None, :]
    picked = jnp.take(label, index, mode="clip")
    return jnp.where(j[None, :] < label_lengths[:, None], picked, blank)


def _extended(label, blank):
    """(N, S) labels as (N, 2S + 1) states: blanks between and around the symbols."""
    n, s = label.shape
    ext = jnp.full((n, 2 * s + 1), blank, label.dtype)
    return ext.at[:, 1::2].set(label)


def _end(alpha, label_lengths):
    """-log P(label) from the states at the last frame: the last symbol or the blank after it."""
    last = jnp.take_along_axis(alpha, 2 * label_lengths[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(alpha, 2 * label_lengths[:, None] - 1, axis=1)[:, 0]
    return -jnp.logaddexp(last, before)


def _step(skip, floor):
    """One frame: a state is reached from itself, the state before it, and (`skip`: a symbol
    differing from the one two states back) the symbol before that; then it emits."""
    def step(alpha, emit):
        n = alpha.shape[0]
        one = jnp.concatenate([jnp.full((n, 1), floor, alpha.dtype), alpha[:, :-1]], axis=1)
        two = jnp.concatenate([jnp.full((n, 2), floor, alpha.dtype), alpha[:, :-2]], axis=1)
        alpha = jnp.logaddexp(alpha, one)
        alpha = jnp.where(skip, jnp.logaddexp(alpha, two), alpha) + emit
        return alpha, alpha

    return step


def _ctc_check(inputs: Sequence, attrs: dict) -> Found:
    """pred (T, N, C) of floats; integer lengths, one per sample; an (N, S) or concatenated
    1-d label; a blank among the C classes. (The values, read on the host, are the functional
    wrapper's to check, in eager code.)"""
    pred, pred_lengths, label, label_lengths = inputs
    ps = dims(pred)
    if len(ps) != 3 or kind(pred) != "f":
        return OpArgumentError, (f"pred must be a float (T, N, C) tensor of probabilities, got "
                                 f"shape {ps} dtype {np.dtype(pred.dtype)}.")
    _, n, c = ps
    for value, name in ((pred_lengths, "pred_lengths"), (label_lengths, "label_lengths"),
                        (label, "label")):
        if (found := integers(value, f"{name} must hold integers, got dtype {{dtype}}; convert "
                                     "it with .astype('int32').")) is not None:
            return found
    for value, name in ((pred_lengths, "pred_lengths"), (label_lengths, "label_lengths")):
        if dims(value) != (n,):
            return OpArgumentError, (f"{name} must have shape ({n},), one length per sample of "
                                     f"pred {ps}; got {dims(value)}.")
    ls, blank = dims(label), attrs["blank"]
    if not (len(ls) == 1 or (len(ls) == 2 and ls[0] == n)):
        return OpArgumentError, (f"label must be (N, S) with N = {n}, or 1-d (the labels "
                                 f"concatenated); got shape {ls}.")
    if not 0 <= blank < c:
        return OpArgumentError, f"blank={blank} must be a class of pred {ps}, in [0, {c})."
    return None


@defop("ctc_loss", amp=FLOAT32, check=_ctc_check, before=_ctc_check)
def ctc_loss(pred, pred_lengths, label, label_lengths, *, blank, width, reduction):
    """Per sample -log of the summed probability of every alignment of `label` in the first
    `pred_lengths` frames of `pred` (T, N, C); `label` is (N, S), or 1-d concatenated labels
    unpacked to `width` columns. "mean" divides each loss by its label length first."""
    if label.ndim == 1:
        label = _padded(label, label_lengths, width, blank)
    ext = _extended(label, blank)
    tiny = jnp.finfo(pred.dtype).tiny
    logp = jnp.log(jnp.maximum(pred, tiny))
    emit = jnp.take_along_axis(logp, ext[None], axis=2, mode="clip")  # (T, N, 2S + 1)
    skip = jnp.pad(ext[:, 2:] != ext[:, :-2], ((0, 0), (2, 0)))
    floor = jnp.log(jnp.asarray(tiny, pred.dtype))
    first = jnp.where(jnp.arange(ext.shape[1]) < 2, emit[0], floor)
    _, alphas = lax.scan(_step(skip, floor), first, emit[1:])
    alphas = jnp.concatenate([first[None], alphas])  # (T, N, 2S + 1)
    last = jnp.take_along_axis(alphas, (pred_lengths - 1)[None, :, None], axis=0)[0]
    loss = _end(last, label_lengths)
    if reduction == "mean":
        return jnp.mean(loss / label_lengths.astype(loss.dtype))
    if reduction == "sum":
        return jnp.sum(loss)
    return loss
