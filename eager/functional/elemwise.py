"""Elementwise functions (MegEngine's `megengine.functional.elemwise`): arithmetic, comparisons,
logic, rounding, exponentials and trigonometry, with broadcasting, each a thin wrapper over its
registry op. `F.nn` (nn.py) makes the activations from the same factory.

>>> import eager as eg, eager.functional as F
>>> F.elemwise.exp(eg.tensor([0.0])).numpy().tolist(), F.maximum(eg.tensor([1, 5]), 3).tolist()
([1.0], [3, 5])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.ops import OPS
from ..core.tensors import Tensor, apply


def _unary(name: str, doc: str | None = None, module: str = __name__) -> Callable[[Any], Tensor]:
    """The function applying registry op `name`, as defined in `module` (the public one)."""
    op = OPS[name]

    def f(x: Any) -> Tensor:
        return apply(op, x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc or f"Elementwise `{name}`."
    f.__module__ = module
    return f


def _binary(name: str, doc: str | None = None) -> Callable[[Any, Any], Tensor]:
    op = OPS[name]

    def f(x: Any, y: Any) -> Tensor:
        return apply(op, x, y)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc or f"Elementwise `{name}` with broadcasting (Python scalars do not upcast)."
    return f


add, sub, mul, div = (_binary(n) for n in ("add", "sub", "mul", "div"))


def pow(x: Any, y: Any) -> Tensor:
    """x ** y with broadcasting; integer to integer powers come out float32 (MegEngine's:
    `F.pow(tensor([2, 3]), -1)` is [0.5, 0.333...])."""
    return apply(OPS["pow"], x, y)


floor_div, mod = _binary("floor_div"), _binary("mod")  # x // y and x % y
maximum, minimum = _binary("maximum"), _binary("minimum")
equal, not_equal = _binary("equal"), _binary("not_equal")
less, less_equal = _binary("less"), _binary("less_equal")
greater, greater_equal = _binary("greater"), _binary("greater_equal")
logical_and, logical_or, logical_xor = (_binary(n) for n in ("logical_and", "logical_or",
                                                             "logical_xor"))
logical_not = _unary("logical_not")
neg, abs, exp, log, log1p, sqrt, rsqrt = (
    _unary(n) for n in ("neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt"))
round, floor, ceil = (_unary(n) for n in ("round", "floor", "ceil"))
sin, cos, tan, tanh = (_unary(n) for n in ("sin", "cos", "tan", "tanh"))
asin, acos, atan, sinh, cosh, asinh, acosh, atanh = (
    _unary(n) for n in ("asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"))
erf, erfinv, expm1, log2, log10, square = (
    _unary(n) for n in ("erf", "erfinv", "expm1", "log2", "log10", "square"))
atan2 = _binary("atan2", "The angle of the point (x, y) for `atan2(y, x)`, in [-pi, pi], with "
                         "broadcasting.")
logaddexp = _binary(
    "logaddexp", "log(exp(x) + exp(y)) elementwise, with broadcasting, without overflow; "
    "integer inputs give float32. logaddexp(-inf, -inf) is -inf and logaddexp(inf, inf) is inf "
    "(MegEngine: nan).")


def clip(x: Any, lower: Any = None, upper: Any = None) -> Tensor:
    """Clamp x to [lower, upper]; either bound may be None."""
    return apply(OPS["clip"], x, lower, upper)


__all__ = [
    "add", "sub", "mul", "div", "floor_div", "mod", "pow", "maximum", "minimum", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    "logical_xor", "logical_not", "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "round",
    "floor", "ceil", "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "atan2", "sinh", "cosh",
    "asinh", "acosh", "atanh", "erf", "erfinv", "expm1", "log2", "log10", "square", "logaddexp",
    "clip",
]
