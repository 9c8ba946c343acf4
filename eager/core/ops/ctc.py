"""The connectionist temporal classification (CTC) loss, MegEngine's definition: `pred` holds
probabilities (not log-probabilities), and its logarithm is floored at log(tiny) of the dtype.

The forward algorithm runs in log space over the label extended with blanks,
`blank l1 blank l2 ... blank`, for the whole batch at once (`lax.scan` over time). States no
path has reached yet hold log(tiny) rather than -inf, as in MegEngine: the loss of a label that
cannot fit in the frames is large but finite, and no gradient is nan.
"""

import jax.numpy as jnp
from jax import lax

from ..amp_policy import FLOAT32
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


@defop("ctc_loss", amp=FLOAT32)
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
