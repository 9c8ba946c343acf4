"""Linear algebra and array utilities with MegEngine 1.13's signatures: `logaddexp`, `dot`,
`diag`, `roll`, `swapaxes`, `meshgrid`, `matinv`, `svd` and the metric `topk_accuracy`.

>>> import eager as eg, eager.functional as F
>>> F.dot(eg.tensor([1.0, 2.0, 3.0]), eg.tensor([4.0, 5.0, 6.0])).item()
32.0
>>> F.roll(eg.tensor([[1, 2], [3, 4], [5, 6]]), 1, 0).numpy().tolist()
[[5, 6], [1, 2], [3, 4]]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np

from ..errors import OpTypeError
from ..op_errors import bad_argument
from ..ops import OPS
from ..tensors import Tensor, apply
from .shape import _t

if TYPE_CHECKING:
    from typing_extensions import TypeIs


def _is_int(v: Any) -> TypeIs[int | np.integer]:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _axis(fn: str, name: str, x: Tensor, axis: Any) -> int:
    """`axis` of `x` made non-negative, or an error naming `fn`, the argument and the shape."""
    if x.ndim == 0:
        raise bad_argument(f"{fn}: a 0-d tensor has no axis {axis!r}; reshape it first.")
    if not _is_int(axis) or not -x.ndim <= axis < x.ndim:
        raise bad_argument(f"{fn}: {name} must be an int in [{-x.ndim}, {x.ndim - 1}] for a "
                           f"tensor of shape {x.shape}, got {axis!r}.")
    return int(axis) % x.ndim


def _floating(fn: str, x: Tensor) -> None:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise bad_argument(f"{fn}: needs a floating-point tensor, got dtype {x.dtype}; convert "
                           "it with .astype('float32').", OpTypeError)


def _matrices(fn: str, x: Tensor) -> None:
    if x.ndim < 2:
        raise bad_argument(f"{fn}: needs a matrix or a batch of them (..., M, N), got shape "
                           f"{x.shape}.")
    _floating(fn, x)


def logaddexp(x: Any, y: Any) -> Tensor:
    """log(exp(x) + exp(y)) elementwise, with broadcasting, without overflow; integer inputs
    give float32. logaddexp(-inf, -inf) is -inf and logaddexp(inf, inf) is inf (MegEngine: nan).
    """
    return apply(OPS["logaddexp"], x, y)


def dot(inp1: Any, inp2: Any) -> Tensor:
    """The inner product of two vectors of the same length (or two scalars): a 0-d tensor.
    For matrices use `matmul`."""
    a, b = _t(inp1), _t(inp2)
    for name, v in (("inp1", a), ("inp2", b)):
        if v.ndim > 1:
            raise bad_argument(f"dot: {name} must be 1-d or 0-d, got shape {v.shape}; use "
                               "F.matmul for matrices.")
    if a.shape != b.shape:
        raise bad_argument(f"dot: inp1 of shape {a.shape} and inp2 of shape {b.shape} must have "
                           "the same shape.")
    return apply(OPS["dot"], a, b)


def diag(inp: Any, k: int = 0) -> Tensor:
    """A 1-d `inp` (n,) placed on diagonal `k` of an (n + |k|, n + |k|) matrix of zeros, or
    diagonal `k` of a 2-d `inp` as a 1-d tensor; k > 0 is above the main diagonal, k < 0 below.

    >>> import eager as eg, eager.functional as F
    >>> F.diag(eg.tensor([[0, 1, 2], [3, 4, 5]]), k=1).numpy().tolist()
    [1, 5]
    """
    x = _t(inp)
    if not _is_int(k):
        raise bad_argument(f"diag: k must be an int, got {k!r}.", OpTypeError)
    if x.ndim > 2:
        raise bad_argument(f"diag: inp must be 1-d (to build a matrix) or 2-d (to read a "
                           f"diagonal), got shape {x.shape}.")
    if x.ndim == 2 and not -x.shape[0] < k < x.shape[1]:
        raise bad_argument(f"diag: a matrix of shape {x.shape} has no diagonal k={k}; k must be "
                           f"in [{1 - x.shape[0]}, {x.shape[1] - 1}].")
    return apply(OPS["diag"], x, k=int(k))


def _roll_pairs(x: Tensor, shift: Any, axis: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shifts, axes) of a `roll`, each shift reduced modulo its axis's length (zeros dropped)."""
    if _is_int(shift) != _is_int(axis) or not all(_is_int(v) or isinstance(v, (tuple, list))
                                                  for v in (shift, axis)):
        raise bad_argument(f"roll: shift {shift!r} and axis {axis!r} must both be ints or both "
                           "tuples of ints of the same length.", OpTypeError)
    shifts = (shift,) if _is_int(shift) else tuple(shift)
    axes = (axis,) if _is_int(axis) else tuple(axis)
    if len(shifts) != len(axes):
        raise bad_argument(f"roll: shift {shift!r} and axis {axis!r} must be as long as each "
                           "other: one shift per axis.")
    if not all(_is_int(s) for s in shifts):
        raise bad_argument(f"roll: the shifts must be ints, got {shift!r}.", OpTypeError)
    pairs = []
    for s, a in zip(shifts, axes):
        a = _axis("roll", "axis", x, a)
        if x.shape[a] and s % x.shape[a]:
            pairs.append((int(s) % x.shape[a], a))
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


def roll(inp: Any, shift: int | Iterable[int], axis: int | Iterable[int] | None = None
         ) -> Tensor:
    """Roll `inp` by `shift` places along `axis`: elements pushed past the end come back at the
    start. Tuples roll by each shift along its axis (an axis may repeat); axis None rolls the
    flattened tensor by an int `shift` and restores the shape."""
    x = _t(inp)
    if axis is None:
        if not _is_int(shift):
            raise bad_argument(f"roll: with axis=None, shift must be an int, got {shift!r}; "
                               "give an axis for each shift.")
        return apply(OPS["roll"], x, shift=int(shift) % x.size if x.size else 0, axis=None)
    shifts, axes = _roll_pairs(x, shift, axis)
    return apply(OPS["roll"], x, shift=shifts, axis=axes)


def swapaxes(inp: Any, axis1: int, axis2: int) -> Tensor:
    """`inp` with axes `axis1` and `axis2` interchanged (negative axes count from the last)."""
    x = _t(inp)
    pattern = list(range(x.ndim))
    a, b = _axis("swapaxes", "axis1", x, axis1), _axis("swapaxes", "axis2", x, axis2)
    pattern[a], pattern[b] = b, a
    return apply(OPS["transpose"], x, axes=tuple(pattern))


def meshgrid(*inputs: Any, indexing: str = "xy") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d tensors of one dtype (a 0-d one counts as length 1): N inputs
    of lengths n1, n2, ... give N tensors of shape (n2, n1, n3, ...) with Cartesian indexing
    "xy", (n1, n2, n3, ...) with matrix indexing "ij" (a tuple, as MegEngine returns).

    >>> import eager as eg, eager.functional as F
    >>> [g.numpy().tolist() for g in F.meshgrid(eg.tensor([1, 2, 3]), eg.tensor([4, 5]))]
    [[[1, 2, 3], [1, 2, 3]], [[4, 4, 4], [5, 5, 5]]]
    """
    if indexing not in ("xy", "ij"):
        raise bad_argument(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}.")
    if not inputs:
        raise bad_argument("meshgrid: needs at least one 1-d tensor.")
    xs = [_t(x) for x in inputs]
    for i, x in enumerate(xs):
        if x.ndim > 1:
            raise bad_argument(f"meshgrid: input {i} must be 1-d, got shape {x.shape}.")
        if x.dtype != xs[0].dtype:
            raise bad_argument(f"meshgrid: the inputs must share one dtype, got {xs[0].dtype} "
                               f"(input 0) and {x.dtype} (input {i}).", OpTypeError)
    return apply(OPS["meshgrid"], *xs, indexing=indexing)


def matinv(inp: Any) -> Tensor:
    """The inverse of a square matrix, or of each in a batch (..., n, n). A singular matrix
    gives inf or nan entries (MegEngine aborts)."""
    x = _t(inp)
    _matrices("matinv", x)
    if x.shape[-1] != x.shape[-2]:
        raise bad_argument(f"matinv: needs square matrices (..., n, n), got shape {x.shape}.")
    return apply(OPS["matinv"], x)


def svd(inp: Any, full_matrices: bool = False, compute_uv: bool = True
        ) -> tuple[Tensor, Tensor, Tensor] | Tensor:
    """The singular value decomposition inp = U @ diag(S) @ Vh of a matrix (..., M, N): the tuple
    (U, S, Vh), S of shape (..., K) in descending order, K = min(M, N); U (..., M, K) and Vh
    (..., K, N), or (..., M, M) and (..., N, N) with `full_matrices` (the columns past K carry
    no gradient). With `compute_uv=False` only S, as a single tensor. Singular vectors are
    unique up to sign: compare U @ diag(S) @ Vh, not U itself, across frameworks.
    """
    x = _t(inp)
    _matrices("svd", x)
    out = apply(OPS["svd"], x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return out if compute_uv else out[0]


def topk_accuracy(logits: Any, target: Any, topk: int | Iterable[int] = 1
                  ) -> Tensor | list[Tensor]:
    """The fraction (a float32 scalar) of the rows of `logits` (N, C) whose class `target[i]`
    is among their `k` largest entries. `topk` an int or a tuple of length 1: one tensor;
    several ks: a list of them, in order (as MegEngine). Carries no gradient.

    >>> import eager as eg, eager.functional as F
    >>> logits = eg.tensor([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1]])
    >>> [a.item() for a in F.topk_accuracy(logits, eg.tensor([2, 1]), (1, 2))]
    [0.0, 1.0]
    """
    x, y = _t(logits), _t(target)
    if x.ndim != 2 or y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise bad_argument(f"topk_accuracy: needs logits (N, C) and target (N,), got shapes "
                           f"{x.shape} and {y.shape}.")
    ks = (topk,) if _is_int(topk) else tuple(topk)
    if not ks or not all(_is_int(k) and 1 <= k <= x.shape[1] for k in ks):
        raise bad_argument(f"topk_accuracy: topk must be an int or ints in [1, {x.shape[1]}] "
                           f"(the classes of logits of shape {x.shape}), got {topk!r}.")
    accs = list(apply(OPS["topk_accuracy"], x, y, topk=tuple(int(k) for k in ks)))
    return accs[0] if len(accs) == 1 else accs


__all__ = ["logaddexp", "dot", "diag", "roll", "swapaxes", "meshgrid", "matinv", "svd",
           "topk_accuracy"]
