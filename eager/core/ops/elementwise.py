"""Elementwise ops: arithmetic, activations, comparisons, logic, rounding and casts; also
`normalize`, the one op here that reduces (an elementwise division by a norm).

Activations whose formula has kinks are written with `where` on the input so that their jax
gradient at the kink is PyTorch's: relu6 and hsigmoid give 0 at their corners, hswish the slope
of its middle piece, elu, selu and prelu the slope of their negative piece at 0.
"""

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy import special

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from . import lean_grads
from .checks import Found, dims
from .ragged_rules import ROWS, along
from .reduction import ord_check, vector_norm
from .registry import defop


def _round_half_away(x):
    """MegEngine's round (C's `roundf`): halves go away from zero, where jnp.round goes to
    even. `x - trunc(x)` is exact, so values just below a half are not pushed over it."""
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    t = jnp.trunc(x)
    return jnp.where(jnp.abs(x - t) >= 0.5, t + jnp.sign(x), t)


def _power(x, y):
    """x ** y; integers (and booleans) to integer powers in float32, as MegEngine computes
    every power (3 ** -1 is 0.333..., 2 ** 2 is 4.0), where jax would wrap in integers."""
    if not jnp.issubdtype(jnp.result_type(x, y), jnp.inexact):
        x, y = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)
    return jnp.power(x, y)


_ARITHMETIC: dict[str, Callable] = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": jnp.true_divide,
    "floor_div": jnp.floor_divide,
    "mod": jnp.remainder,
    "pow": _power,
    "int_pow": jnp.power,  # `x **= y` of integers: x keeps its dtype
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "neg": jnp.negative,
    "abs": jnp.abs,
    "exp": jnp.exp,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    # where(x > 0) rather than maximum(x, 0): the gradient at 0 is 0, as in PyTorch and MegEngine.
    "relu": lambda x: jnp.where(x > 0, x, jnp.zeros_like(x)),
    "gelu": lean_grads.gelu,
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "atan2": jnp.arctan2,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
    "erf": special.erf,
    "erfinv": special.erfinv,
    "expm1": jnp.expm1,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "square": jnp.square,
    "logsigmoid": jax.nn.log_sigmoid,
    "softsign": jax.nn.soft_sign,
    "round": _round_half_away,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "sign": jnp.sign,
    "clip": jnp.clip,
    "where": jnp.where,
}

_PREDICATES: dict[str, Callable] = {
    "equal": jnp.equal,
    "not_equal": jnp.not_equal,
    "less": jnp.less,
    "less_equal": jnp.less_equal,
    "greater": jnp.greater,
    "greater_equal": jnp.greater_equal,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
    "logical_xor": jnp.logical_xor,
    "logical_not": jnp.logical_not,
    "bitwise_and": jnp.bitwise_and,
    "bitwise_or": jnp.bitwise_or,
    "bitwise_xor": jnp.bitwise_xor,
    "bitwise_not": jnp.bitwise_not,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
}

# Elementwise: each row of a ragged axis 0 independent of the others (broadcasting is checked
# per call in ragged_dispatch.py).
for _name, _fn in _ARITHMETIC.items():
    defop(_name, ragged=ROWS, quick=True)(_fn)
for _name, _fn in _PREDICATES.items():
    defop(_name, differentiable=False, ragged=ROWS, quick=True)(_fn)


@defop("leaky_relu", ragged=ROWS, quick=True)
def leaky_relu(x, *, negative_slope):
    return jnp.where(x > 0, x, x * negative_slope)


@defop("astype", ragged=ROWS, quick=True)
def astype(x, *, dtype):
    return x.astype(dtype)



def _relu6(x):
    # where on x, not clip: the gradient is 0 at both corners (0 and 6), as PyTorch's hardtanh
    return jnp.where(x <= 0, jnp.zeros_like(x), jnp.where(x >= 6, jnp.full_like(x, 6), x))


defop("relu6", ragged=ROWS, quick=True)(_relu6)
defop("hsigmoid", ragged=ROWS, quick=True)(lambda x: _relu6(x + 3) / 6)


@defop("hswish", ragged=ROWS, quick=True)
def hswish(x):
    # x * relu6(x + 3) / 6, split into its three pieces: at -3 and 3 the gradient is the middle
    # piece's slope (x / 3 + 1/2), PyTorch's convention, which the product rule would not give.
    middle = x * (x + 3) / 6
    return jnp.where(x < -3, jnp.zeros_like(middle), jnp.where(x <= 3, middle, x))


def _elu(x, alpha):
    # expm1 sees only the non-positive values: on a large positive x the discarded branch would
    # overflow to inf and its zero cotangent would turn the gradient into nan
    negative = alpha * jnp.expm1(jnp.where(x > 0, jnp.zeros_like(x), x))
    return jnp.where(x > 0, x, negative)


@defop("elu", ragged=ROWS, quick=True)
def elu(x, *, alpha):
    return _elu(x, alpha)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@defop("selu", ragged=ROWS, quick=True)
def selu(x):
    return _SELU_SCALE * _elu(x, _SELU_ALPHA)


def _prelu_check(inputs: Sequence, attrs: dict) -> Found:
    """A slope for every channel (axis 1), or one for all."""
    xs, size = dims(inputs[0]), math.prod(dims(inputs[1]))
    channels = xs[1] if len(xs) >= 2 else 1
    if size not in (1, channels):
        return OpArgumentError, (f"weight has {size} elements for an input of shape {xs}; give "
                                 f"it 1 element or one per channel ({channels}, axis 1 of the "
                                 "input).")
    return None


@defop("prelu", ragged=ROWS, quick=True, check=_prelu_check, before=_prelu_check)
def prelu(x, weight):
    """x where x > 0, else weight * x; a weight with one element per channel applies along
    axis 1."""
    if weight.size == 1:
        w = weight.reshape(())
    else:
        w = weight.reshape((1, -1) + (1,) * (x.ndim - 2))
    return jnp.where(x > 0, x, w * x)


@defop("normalize", ragged=along(inside=None), amp=FLOAT32, before=ord_check)
def normalize(x, *, ord, axis, eps):
    """x / max(norm(x, ord, axis), eps): MegEngine's F.normalize, the gradient through a norm
    below eps being that of x / eps (PyTorch's)."""
    norm = vector_norm(x, ord, axis, keepdims=True, zero_safe=True)  # a zero vector's grad: 0
    return x / jnp.where(norm > eps, norm, jnp.full_like(norm, eps))
