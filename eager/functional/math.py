"""Elementwise functions and reductions: thin wrappers over the registry ops."""

from __future__ import annotations

import math
from typing import Any

from ..ops import OPS
from ..tensor import Tensor, _axis_arg, apply


def _unary(name: str):
    op = OPS[name]

    def f(x: Any) -> Tensor:
        return apply(op, x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise `{name}`."
    return f


def _binary(name: str):
    op = OPS[name]

    def f(x: Any, y: Any) -> Tensor:
        return apply(op, x, y)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise `{name}` with broadcasting (Python scalars do not upcast)."
    return f


add, sub, mul, div, pow = (_binary(n) for n in ("add", "sub", "mul", "div", "pow"))
maximum, minimum = _binary("maximum"), _binary("minimum")
equal, not_equal = _binary("equal"), _binary("not_equal")
less, less_equal = _binary("less"), _binary("less_equal")
greater, greater_equal = _binary("greater"), _binary("greater_equal")
logical_and, logical_or, logical_xor = (_binary(n) for n in ("logical_and", "logical_or",
                                                             "logical_xor"))
neg, abs, exp, log, log1p, sqrt, rsqrt = (
    _unary(n) for n in ("neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt"))
sin, cos, tanh, sigmoid, relu = (_unary(n) for n in ("sin", "cos", "tanh", "sigmoid", "relu"))
gelu, silu, softplus = _unary("gelu"), _unary("silu"), _unary("softplus")
logical_not, isnan, isinf = _unary("logical_not"), _unary("isnan"), _unary("isinf")
round, floor, ceil, sign = (_unary(n) for n in ("round", "floor", "ceil", "sign"))


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    """x where x > 0, else negative_slope * x."""
    return apply(OPS["leaky_relu"], x, negative_slope=float(negative_slope))


def clip(x: Any, lower: Any = None, upper: Any = None) -> Tensor:
    """Clamp x to [lower, upper]; either bound may be None."""
    return apply(OPS["clip"], x, lower, upper)


def where(mask: Any, x: Any, y: Any) -> Tensor:
    """x where mask is true, else y (with broadcasting)."""
    return apply(OPS["where"], mask, x, y)


def _reduction(name: str):
    op = OPS[name]

    def f(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
        return apply(op, x, axis=_axis_arg(axis), keepdims=bool(keepdims))

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"`{name}` over `axis` (None: all axes)."
    return f


sum, mean, max, min, prod, logsumexp = (
    _reduction(n) for n in ("sum", "mean", "max", "min", "prod", "logsumexp"))


def var(x: Any, axis: Any = None, keepdims: bool = False, unbiased: bool = False) -> Tensor:
    """Variance over `axis`: the population statistic unless `unbiased=True` (MegEngine)."""
    return apply(OPS["var"], x, axis=_axis_arg(axis), keepdims=keepdims, ddof=int(unbiased))


def std(x: Any, axis: Any = None, keepdims: bool = False, unbiased: bool = False) -> Tensor:
    """Standard deviation over `axis`; population statistic unless `unbiased=True`."""
    return apply(OPS["std"], x, axis=_axis_arg(axis), keepdims=keepdims, ddof=int(unbiased))


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    return apply(OPS["argmax"], x, axis=axis, keepdims=keepdims)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    return apply(OPS["argmin"], x, axis=axis, keepdims=keepdims)


def norm(x: Any, ord: float | None = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The vector p-norm over `axis` (all elements if None); `ord` None means 2."""
    ord = 2.0 if ord is None else float(ord)
    if not (ord in (math.inf, -math.inf) or ord >= 0):
        raise ValueError(f"norm: ord must be >= 0 or +-inf, got {ord}")
    return apply(OPS["norm"], x, ord=ord, axis=_axis_arg(axis), keepdims=keepdims)

__all__ = [
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh",
    "sigmoid", "relu", "gelu", "silu", "softplus", "leaky_relu", "isnan", "isinf", "round",
    "floor", "ceil", "sign", "clip", "where", "sum", "mean", "max", "min", "prod", "var", "std",
    "argmax", "argmin", "logsumexp", "norm",
]
