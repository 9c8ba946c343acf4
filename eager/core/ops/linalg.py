"""Linear algebra and related ops: logaddexp, dot, diag, roll, meshgrid, matrix inverse, SVD,
and top-k accuracy, with their argument checks. Their functional wrappers (in
`eager/functional/`: `elemwise.py`, `math.py`, `tensor.py` and `metric.py`, as MegEngine places
them) read the options and pass canonical static attributes.

Inverse and SVD have no float16/bfloat16 kernels in jax: those inputs are computed in float32
and the results cast back, as MegEngine's float16 matinv returns float16.
"""

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import OpArgumentError, OpTypeError
from .checks import Found, dims, dtype_of, kind
from .ragged_rules import ROWS
from .registry import defop

_LOW = (jnp.float16, jnp.bfloat16)

defop("logaddexp", ragged=ROWS)(jnp.logaddexp)


def _dot_check(inputs: Sequence, attrs: dict) -> Found:
    """Two vectors (or scalars) of one shape: jnp.dot would multiply matrices too."""
    a, b = (dims(v) for v in inputs)
    for name, shape in (("inp1", a), ("inp2", b)):
        if len(shape) > 1:
            return OpArgumentError, (f"{name} must be 1-d or 0-d, got shape {shape}; use "
                                     "F.matmul for matrices.")
    if a != b:
        return OpArgumentError, (f"inp1 of shape {a} and inp2 of shape {b} must have the same "
                                 "shape.")
    return None


defop("dot", check=_dot_check, before=_dot_check)(jnp.dot)


def _diag_check(inputs: Sequence, attrs: dict) -> Found:
    xs, k = dims(inputs[0]), attrs["k"]
    if len(xs) > 2:
        return OpArgumentError, (f"inp must be 1-d (to build a matrix) or 2-d (to read a "
                                 f"diagonal), got shape {xs}.")
    if len(xs) == 2 and not -xs[0] < k < xs[1]:  # jnp.diag would give an empty one
        return OpArgumentError, (f"a matrix of shape {xs} has no diagonal k={k}; k must be in "
                                 f"[{1 - xs[0]}, {xs[1] - 1}].")
    return None


@defop("diag", check=_diag_check, before=_diag_check)
def diag(x, *, k):
    """A 1-d (or 0-d: one element) `x` placed on diagonal `k` of a square matrix, or diagonal
    `k` of a 2-d `x`."""
    return jnp.diag(jnp.ravel(x) if x.ndim == 0 else x, k)


@defop("roll")
def roll(x, *, shift, axis):
    """`x` rolled by `shift[i]` along `axis[i]`; axis None: rolled as if flat (shift an int)."""
    return jnp.roll(x, shift, axis)


def _meshgrid_check(inputs: Sequence, attrs: dict) -> Found:
    """At least one input, each 1-d (or 0-d), all of one dtype."""
    if not inputs:
        return OpArgumentError, "needs at least one 1-d tensor."
    first = dtype_of(inputs[0])
    for i, x in enumerate(inputs):
        if len(dims(x)) > 1:
            return OpArgumentError, f"input {i} must be 1-d, got shape {dims(x)}."
        if dtype_of(x) != first:
            return OpTypeError, (f"the inputs must share one dtype, got {first} (input 0) and "
                                 f"{dtype_of(x)} (input {i}).")
    return None


@defop("meshgrid", multi_output=True, check=_meshgrid_check, before=_meshgrid_check)
def meshgrid(*xs, indexing):
    return tuple(jnp.meshgrid(*(jnp.ravel(x) for x in xs), indexing=indexing))


def _in_float32(fn, x):
    """`fn(x)` computed in float32 for a low precision `x`, each result cast back to its dtype."""
    if x.dtype not in _LOW:
        return fn(x)
    out = fn(x.astype(jnp.float32))
    return tuple(o.astype(x.dtype) for o in out) if isinstance(out, tuple) else out.astype(x.dtype)


def _matrices_check(inputs: Sequence, attrs: dict) -> Found:
    """A matrix or a batch of them (..., M, N), of floats: what the decompositions take."""
    x = inputs[0]
    if len(dims(x)) < 2:
        return OpArgumentError, (f"needs a matrix or a batch of them (..., M, N), got shape "
                                 f"{dims(x)}.")
    if kind(x) != "f":
        return OpTypeError, (f"needs a floating-point tensor, got dtype {np.dtype(x.dtype)}; "
                             "convert it with .astype('float32').")
    return None


def _square_check(inputs: Sequence, attrs: dict) -> Found:
    if (found := _matrices_check(inputs, attrs)) is not None:
        return found
    xs = dims(inputs[0])
    if xs[-1] != xs[-2]:
        return OpArgumentError, f"needs square matrices (..., n, n), got shape {xs}."
    return None


defop("matinv", check=_square_check, before=_square_check)(
    lambda x: _in_float32(jnp.linalg.inv, x))


@defop("svd", multi_output=True, check=_matrices_check, before=_matrices_check)
def svd(x, *, full_matrices, compute_uv):
    """(U, S, Vh) of `x` (..., M, N), or (S,) without `compute_uv`."""
    if not compute_uv:
        return (_in_float32(lambda a: jnp.linalg.svd(a, compute_uv=False), x),)
    return _in_float32(lambda a: _svd(a, full_matrices), x)


def _svd(x, full_matrices):
    u, s, vh = jnp.linalg.svd(x, full_matrices=False)
    m, n = x.shape[-2:]
    if not full_matrices or m == n:
        return u, s, vh
    # jax has no gradient rule for full matrices: the reduced factors carry the gradient and the
    # extra columns (rows of Vh), any orthonormal basis of the complement of theirs, carry none.
    # A complete QR of the reduced factor gives that basis, orthogonal to it by construction.
    if m > n:
        rest = jnp.linalg.qr(lax.stop_gradient(u), mode="complete")[0][..., n:]
        return jnp.concatenate([u, rest], axis=-1), s, vh
    rest = jnp.linalg.qr(jnp.swapaxes(lax.stop_gradient(vh), -1, -2), mode="complete")[0]
    return u, s, jnp.concatenate([vh, jnp.swapaxes(rest[..., m:], -1, -2)], axis=-2)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _accuracy_check(inputs: Sequence, attrs: dict) -> Found:
    """Logits (N, C) and one target per row; each k of `topk` (an int or ints, as the
    functional spells it) a count of classes in [1, C]."""
    (xs, ys), topk = (dims(v) for v in inputs), attrs["topk"]
    if len(xs) != 2 or len(ys) != 1 or ys[0] != xs[0]:
        return OpArgumentError, (f"needs logits (N, C) and target (N,), got shapes {xs} and "
                                 f"{ys}.")
    ks = (topk,) if _is_int(topk) else tuple(topk)
    if not ks or not all(_is_int(k) and 1 <= k <= xs[1] for k in ks):
        return OpArgumentError, (f"topk must be an int or ints in [1, {xs[1]}] (the classes of "
                                 f"logits of shape {xs}), got {topk!r}.")
    return None


@defop("topk_accuracy", differentiable=False, multi_output=True, before=_accuracy_check)
def topk_accuracy(logits, target, *, topk):
    """The fraction of rows of `logits` (N, C) whose `target` is among their k largest entries,
    one float32 scalar per k of `topk` (ties: the lower index ranks first)."""
    if logits.dtype == jnp.bool_:
        logits = logits.astype(jnp.int8)
    _, pred = lax.top_k(logits, max(topk))
    hits = pred == target[:, None]
    n = jnp.float32(logits.shape[0])
    return tuple(jnp.sum(hits[:, :k], dtype=jnp.float32) / n for k in topk)
