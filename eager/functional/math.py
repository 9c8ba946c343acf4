"""Mathematical functions (MegEngine's `megengine.functional.math`): reductions, sorting and
top-k along the last axis, norms, matrix products, `einsum`, and linear algebra (`dot`,
`matinv`, `svd`).

>>> import eager as eg, eager.functional as F
>>> F.math.sum(eg.tensor([[1.0, 2.0], [3.0, 4.0]]), axis=1).numpy().tolist()
[3.0, 7.0]
>>> F.dot(eg.tensor([1.0, 2.0, 3.0]), eg.tensor([4.0, 5.0, 6.0])).item()
32.0
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import ragged_forms
from ..core.errors import OpTypeError
from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.tensor_methods import axis_arg
from ..core.tensors import Tensor, apply
from ._args import _compute_mode, _t
from .elemwise import _unary

# `sum`, `max` and `min` below are the reductions: this module spells Python's as `builtins.max`

isnan, isinf, sign = (_unary(n, module=__name__) for n in ("isnan", "isinf", "sign"))


def _reduction(name: str, module: str = __name__) -> Callable[..., Tensor]:
    """The reduction applying registry op `name`, as defined in `module` (the public one)."""
    op = OPS[name]

    def f(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
        return apply(op, x, axis=axis_arg(axis), keepdims=bool(keepdims))

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"`{name}` over `axis` (None: all axes)."
    f.__module__ = module
    return f


sum, mean, max, min, prod = (_reduction(n) for n in ("sum", "mean", "max", "min", "prod"))


def var(x: Any, axis: Any = None, keepdims: bool = False, unbiased: bool = False) -> Tensor:
    """Variance over `axis`: the population statistic unless `unbiased=True` (MegEngine)."""
    return apply(OPS["var"], x, axis=axis_arg(axis), keepdims=keepdims, ddof=int(unbiased))


def std(x: Any, axis: Any = None, keepdims: bool = False, unbiased: bool = False) -> Tensor:
    """Standard deviation over `axis`; population statistic unless `unbiased=True`."""
    return apply(OPS["std"], x, axis=axis_arg(axis), keepdims=keepdims, ddof=int(unbiased))


def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The index of the largest value over `axis` (None: of the flattened tensor). Several
    axes act as one, their index counting row-major through them, as numpy's argmax of the
    tensor with those axes flattened.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[1.0, 0.0], [0.0, 2.0]], [[3.0, 0.0], [0.0, 0.0]]])
    >>> F.argmax(x, axis=(0, 1)).numpy()
    array([2, 1], dtype=int32)
    """
    return apply(OPS["argmax"], x, axis=axis_arg(axis), keepdims=bool(keepdims))


def argmin(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The index of the smallest value over `axis`; several axes act as one (see `argmax`)."""
    return apply(OPS["argmin"], x, axis=axis_arg(axis), keepdims=bool(keepdims))


def norm(x: Any, ord: float | None = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The vector p-norm over `axis` (all elements if None); `ord` None means 2."""
    ord = 2.0 if ord is None else number(ord, "ord")
    require("norm", x, ord=ord)
    return apply(OPS["norm"], x, ord=ord, axis=axis_arg(axis), keepdims=keepdims)


def normalize(x: Any, ord: float | None = 2, axis: Any = None, eps: float = 1e-12) -> Tensor:
    """x / max(norm(x, ord, axis), eps): unit p-norm along `axis` (None: the whole tensor), as
    MegEngine's F.normalize. A vector whose norm is below `eps` is divided by `eps`, and its
    gradient is finite (that of x / eps), not nan.

    >>> import eager as eg, eager.functional as F
    >>> F.normalize(eg.tensor([[3.0, 4.0], [0.0, 0.0]]), axis=1).numpy().tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    ord = 2.0 if ord is None else number(ord, "ord")
    require("normalize", x, ord=ord)
    return apply(OPS["normalize"], x, ord=ord, axis=axis_arg(axis), eps=number(eps, "eps"))


# ----- sorting and top-k along the last axis --------------------------------------------------
def sort(x: Any, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, int32 indices) sorted along the last axis; ties keep their order.

    >>> import eager as eg, eager.functional as F
    >>> [t.numpy().tolist() for t in F.sort(eg.tensor([3.0, 1.0, 2.0]), descending=True)]
    [[3.0, 2.0, 1.0], [0, 2, 1]]
    """
    x = _t(x)
    require("sort", x)  # the op's rule, whether the op or a ragged form sorts
    if ragged_forms.ragged_rows(x):
        return ragged_forms.order(x, descending)
    return apply(OPS["sort"], x, descending=bool(descending))


def argsort(x: Any, descending: bool = False) -> Tensor:
    """The int32 indices that sort `x` along the last axis (stable)."""
    x = _t(x)
    require("argsort", x)
    if ragged_forms.ragged_rows(x):
        return ragged_forms.order(x, descending)[1]
    return apply(OPS["argsort"], x, descending=bool(descending))


def topk(x: Any, k: Any, descending: bool = True, kth_only: bool = False,
         no_sort: bool = False) -> tuple[Tensor, Tensor]:
    """(values, int32 indices) of the `k` largest entries along the last axis (the smallest with
    `descending=False`), in order; MegEngine's default is descending too. With `kth_only` only
    the k-th one: the last axis is dropped. `no_sort` allows any order; the result here is
    always sorted.

    As in MegEngine, `k` may be a Tensor (its value is read), a `k` above the axis length gives
    the whole axis sorted, and a negative `k` gives the `-k` entries from the other end, in the
    order seen from there (`F.topk(x, -1)` is the smallest with `descending=True`).

    >>> import eager as eg, eager.functional as F
    >>> [t.numpy().tolist() for t in F.topk(eg.tensor([2.0, 4.0, 1.0, 3.0]), 2)]
    [[4.0, 3.0], [1, 3]]
    >>> [t.numpy().tolist() for t in F.topk(eg.tensor([2.0, 4.0, 1.0, 3.0]), -2)]
    [[1.0, 2.0], [2, 0]]
    """
    x = _t(x)
    require("topk", x)
    n = x.shape[-1]
    counted = ragged_forms.counted(k)
    if isinstance(k, Tensor) and k.size == 1 and np.dtype(k.dtype).kind in "iu":
        k = k.item()
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k == 0:
        raise bad_argument(f"topk: k must be a nonzero int (or an int Tensor of one element), "
                           f"got {k!r}, for the last axis of shape {x.shape}.")
    if k < 0:
        k, descending = -k, not descending
    if not kth_only and x.ndim == 1 and (counted or ragged_forms.ragged_rows(x)):
        # a count-sized result: ragged, so that what follows compiles once per capacity
        return ragged_forms.topk(x, int(k), descending, counted)
    return apply(OPS["topk"], x, k=builtins.min(int(k), n), descending=bool(descending),
                 kth_only=bool(kth_only))


# ----- products and linear algebra -------------------------------------------------------------
def dot(inp1: Any, inp2: Any) -> Tensor:
    """The inner product of two vectors of the same length (or two scalars): a 0-d tensor.
    For matrices use `matmul`."""
    a, b = _t(inp1), _t(inp2)
    require("dot", a, b)
    return apply(OPS["dot"], a, b)


def matinv(inp: Any) -> Tensor:
    """The inverse of a square matrix, or of each in a batch (..., n, n). A singular matrix
    gives inf or nan entries (MegEngine aborts)."""
    x = _t(inp)
    require("matinv", x)
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
    require("svd", x)
    out = apply(OPS["svd"], x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return out if compute_uv else out[0]


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           compute_mode: str = "default") -> Tensor:
    """Matrix product with broadcasting over leading axes. `compute_mode` is MegEngine's
    ("default" or "float32": float16 products accumulated in float32, which XLA does anyway)."""
    _compute_mode("matmul", compute_mode)
    if transpose_a:
        a = a.transpose(*range(a.ndim - 2), a.ndim - 1, a.ndim - 2)
    if transpose_b:
        b = b.transpose(*range(b.ndim - 2), b.ndim - 1, b.ndim - 2)
    return apply(OPS["matmul"], a, b)


def einsum(subscripts: str, *operands: Any) -> Tensor:
    """Einstein summation, numpy's notation (`...` broadcasts; operands may also be one list).

    >>> import eager as eg, eager.functional as F
    >>> F.einsum("ij,j->i", eg.tensor([[1.0, 2.0], [3.0, 4.0]]), eg.tensor([1.0, 1.0])).numpy()
    array([3., 7.], dtype=float32)
    """
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(subscripts, str):
        raise bad_argument(f"einsum: subscripts must be a string like 'ij,jk->ik', got "
                           f"{type(subscripts).__name__}.", OpTypeError)
    subscripts = subscripts.replace(" ", "")
    require("einsum", *operands, subscripts=subscripts)
    return apply(OPS["einsum"], *operands, subscripts=subscripts)


__all__ = [
    "sum", "mean", "max", "min", "prod", "var", "std", "argmax", "argmin", "norm", "normalize",
    "isnan", "isinf", "sign", "sort", "argsort", "topk", "dot", "matinv", "svd", "matmul",
    "einsum",
]
