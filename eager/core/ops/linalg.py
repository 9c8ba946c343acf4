"""Linear algebra and related ops: logaddexp, dot, diag, roll, meshgrid, matrix inverse, SVD,
and top-k accuracy. Their functional wrappers (in `eager/functional/`: `elemwise.py`, `math.py`,
`tensor.py` and `metric.py`, as MegEngine places them) check the arguments and pass canonical
static attributes.

Inverse and SVD have no float16/bfloat16 kernels in jax: those inputs are computed in float32
and the results cast back, as MegEngine's float16 matinv returns float16.
"""

import jax.numpy as jnp
from jax import lax

from .ragged_rules import ROWS
from .registry import defop

_LOW = (jnp.float16, jnp.bfloat16)

defop("logaddexp", ragged=ROWS)(jnp.logaddexp)
defop("dot")(jnp.dot)  # 1-d or 0-d operands of equal shape (checked by the wrapper)


@defop("diag")
def diag(x, *, k):
    """A 1-d (or 0-d: one element) `x` placed on diagonal `k` of a square matrix, or diagonal
    `k` of a 2-d `x`."""
    return jnp.diag(jnp.ravel(x) if x.ndim == 0 else x, k)


@defop("roll")
def roll(x, *, shift, axis):
    """`x` rolled by `shift[i]` along `axis[i]`; axis None: rolled as if flat (shift an int)."""
    return jnp.roll(x, shift, axis)


@defop("meshgrid", multi_output=True)
def meshgrid(*xs, indexing):
    return tuple(jnp.meshgrid(*(jnp.ravel(x) for x in xs), indexing=indexing))


def _in_float32(fn, x):
    """`fn(x)` computed in float32 for a low precision `x`, each result cast back to its dtype."""
    if x.dtype not in _LOW:
        return fn(x)
    out = fn(x.astype(jnp.float32))
    return tuple(o.astype(x.dtype) for o in out) if isinstance(out, tuple) else out.astype(x.dtype)


defop("matinv")(lambda x: _in_float32(jnp.linalg.inv, x))


@defop("svd", multi_output=True)
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


@defop("topk_accuracy", differentiable=False, multi_output=True)
def topk_accuracy(logits, target, *, topk):
    """The fraction of rows of `logits` (N, C) whose `target` is among their k largest entries,
    one float32 scalar per k of `topk` (ties: the lower index ranks first)."""
    if logits.dtype == jnp.bool_:
        logits = logits.astype(jnp.int8)
    _, pred = lax.top_k(logits, max(topk))
    hits = pred == target[:, None]
    n = jnp.float32(logits.shape[0])
    return tuple(jnp.sum(hits[:, :k], dtype=jnp.float32) / n for k in topk)
