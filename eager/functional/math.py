"""Elementwise functions and reductions: thin wrappers over the registry ops."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..indexing import _axis_arg
from ..op_errors import bad_argument, check_power, number
from ..ops import OPS
from ..tensors import Tensor, apply


def _unary(name: str) -> Callable[[Any], Tensor]:
    op = OPS[name]

    def f(x: Any) -> Tensor:
        return apply(op, x)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise `{name}`."
    return f


def _binary(name: str) -> Callable[[Any, Any], Tensor]:
    op = OPS[name]

    def f(x: Any, y: Any) -> Tensor:
        return apply(op, x, y)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise `{name}` with broadcasting (Python scalars do not upcast)."
    return f


add, sub, mul, div = (_binary(n) for n in ("add", "sub", "mul", "div"))


def pow(x: Any, y: Any) -> Tensor:
    """x ** y with broadcasting; an integer x to a negative Python int power raises."""
    check_power(x, y)
    return apply(OPS["pow"], x, y)


floor_div, mod = _binary("floor_div"), _binary("mod")  # x // y and x % y
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
tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh = (
    _unary(n) for n in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"))
erf, erfinv, expm1, log2, log10, square = (
    _unary(n) for n in ("erf", "erfinv", "expm1", "log2", "log10", "square"))
atan2 = _binary("atan2")
atan2.__doc__ = "The angle of the point (x, y) for `atan2(y, x)`, in [-pi, pi], with broadcasting."
relu6, hswish, hsigmoid, selu, logsigmoid, softsign = (
    _unary(n) for n in ("relu6", "hswish", "hsigmoid", "selu", "logsigmoid", "softsign"))
relu6.__doc__ = "min(max(x, 0), 6); the gradient is 0 at 0 and at 6 (PyTorch's convention)."
hswish.__doc__ = "x * relu6(x + 3) / 6 (MegEngine's hswish, PyTorch's hardswish)."
hsigmoid.__doc__ = "relu6(x + 3) / 6 (MegEngine's hsigmoid, PyTorch's hardsigmoid)."
selu.__doc__ = "scale * elu(x, alpha), self-normalizing: scale ~1.0507, alpha ~1.6733."
logsigmoid.__doc__ = "log(sigmoid(x)), as -softplus(-x): it neither under- nor overflows."
softsign.__doc__ = "x / (1 + |x|)."


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    """x where x > 0, else negative_slope * x."""
    return apply(OPS["leaky_relu"], x, negative_slope=number(negative_slope, "negative_slope"))


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    """x where x > 0, else alpha * (exp(x) - 1); the gradient at 0 is alpha (PyTorch's)."""
    return apply(OPS["elu"], x, alpha=number(alpha, "alpha"))


def prelu(x: Any, weight: Any) -> Tensor:
    """x where x > 0, else weight * x, with a learned slope `weight`: a single element, or one
    element per channel (axis 1 of x), applied along that axis whatever the weight's shape.

    >>> import eager as eg, eager.functional as F
    >>> F.prelu(eg.tensor([[-2.0, 3.0]]), eg.tensor([0.5, 0.1])).numpy().tolist()
    [[-1.0, 3.0]]
    """
    size = int(np.prod(_shape(weight)))
    x_shape = _shape(x)
    channels = x_shape[1] if len(x_shape) >= 2 else 1
    if size not in (1, channels):
        raise bad_argument(
            f"prelu: weight has {size} elements for an input of shape {x_shape}; give it 1 "
            f"element or one per channel ({channels}, axis 1 of the input).")
    return apply(OPS["prelu"], x, weight)


def normalize(x: Any, ord: float | None = 2, axis: Any = None, eps: float = 1e-12) -> Tensor:
    """x / max(norm(x, ord, axis), eps): unit p-norm along `axis` (None: the whole tensor), as
    MegEngine's F.normalize. A vector whose norm is below `eps` is divided by `eps`, and its
    gradient is finite (that of x / eps), not nan.

    >>> import eager as eg, eager.functional as F
    >>> F.normalize(eg.tensor([[3.0, 4.0], [0.0, 0.0]]), axis=1).numpy().tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    ord = 2.0 if ord is None else number(ord, "ord")
    if not (ord in (math.inf, -math.inf) or ord >= 0):
        raise bad_argument(f"normalize: ord must be >= 0 or +-inf, got {ord}.")
    return apply(OPS["normalize"], x, ord=ord, axis=_axis_arg(axis), eps=number(eps, "eps"))


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(v.shape) if hasattr(v, "shape") else np.shape(v)


def clip(x: Any, lower: Any = None, upper: Any = None) -> Tensor:
    """Clamp x to [lower, upper]; either bound may be None."""
    return apply(OPS["clip"], x, lower, upper)


def where(mask: Any, x: Any, y: Any) -> Tensor:
    """x where mask is true, else y (with broadcasting)."""
    return apply(OPS["where"], mask, x, y)


def _reduction(name: str) -> Callable[..., Tensor]:
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


def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The index of the largest value over `axis` (None: of the flattened tensor). Several
    axes act as one, their index counting row-major through them, as numpy's argmax of the
    tensor with those axes flattened.

    >>> import eager as eg, eager.functional as F
    >>> x = eg.tensor([[[1.0, 0.0], [0.0, 2.0]], [[3.0, 0.0], [0.0, 0.0]]])
    >>> F.argmax(x, axis=(0, 1)).numpy()
    array([2, 1], dtype=int32)
    """
    return apply(OPS["argmax"], x, axis=_axis_arg(axis), keepdims=bool(keepdims))


def argmin(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The index of the smallest value over `axis`; several axes act as one (see `argmax`)."""
    return apply(OPS["argmin"], x, axis=_axis_arg(axis), keepdims=bool(keepdims))


def norm(x: Any, ord: float | None = None, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The vector p-norm over `axis` (all elements if None); `ord` None means 2."""
    ord = 2.0 if ord is None else number(ord, "ord")
    if not (ord in (math.inf, -math.inf) or ord >= 0):
        raise bad_argument(f"norm: ord must be >= 0 or +-inf, got {ord}.")
    return apply(OPS["norm"], x, ord=ord, axis=_axis_arg(axis), keepdims=keepdims)

__all__ = [
    "add", "sub", "mul", "div", "floor_div", "mod", "pow", "maximum", "minimum", "equal",
    "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "logical_not", "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh",
    "sigmoid", "relu", "gelu", "silu", "softplus", "leaky_relu", "isnan", "isinf", "round",
    "floor", "ceil", "sign", "clip", "where", "sum", "mean", "max", "min", "prod", "var", "std",
    "argmax", "argmin", "logsumexp", "norm",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf",
    "erfinv", "expm1", "log2", "log10", "square", "relu6", "hswish", "hsigmoid", "elu", "selu",
    "logsigmoid", "softsign", "prelu", "normalize",
]
