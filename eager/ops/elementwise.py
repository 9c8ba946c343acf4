"""Elementwise ops: arithmetic, activations, comparisons, logic, rounding and casts."""

import jax
import jax.numpy as jnp
from jax import lax

from .registry import defop

_ARITHMETIC = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": jnp.true_divide,
    "floor_div": jnp.floor_divide,
    "mod": jnp.remainder,
    "pow": jnp.power,
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
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
    "round": jnp.round,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "sign": jnp.sign,
    "clip": jnp.clip,
    "where": jnp.where,
}

_PREDICATES = {
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

for _name, _fn in _ARITHMETIC.items():
    defop(_name)(_fn)
for _name, _fn in _PREDICATES.items():
    defop(_name, differentiable=False)(_fn)


@defop("leaky_relu")
def leaky_relu(x, *, negative_slope):
    return jnp.where(x > 0, x, x * negative_slope)


@defop("astype")
def astype(x, *, dtype):
    return x.astype(dtype)

