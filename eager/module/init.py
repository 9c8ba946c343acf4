"""In-place initializers, drawing from the framework generator (`eg.random`), with MegEngine's
names (`M.init.msra_normal_(conv.weight, nonlinearity="relu")`) and its fan and gain helpers.

Fans are MegEngine's: a grouped convolution's weight, (groups, out / groups, in / groups,
*kernel), has fan_in in / groups * kernel and fan_out out / groups * kernel (PyTorch counts
out * kernel). The convolutions mark their grouped weights (`mark_grouped`), so a 5-d plain
`Conv3d` weight is not mistaken for a grouped `Conv2d` one, as MegEngine's shape rule does.
"""

from __future__ import annotations

import math
import threading
import weakref

import jax.numpy as jnp

from .. import random
from ..core.device import commit
from ..core.op_errors import bad_argument
from ..core.tensors import Tensor, _wrap, rebind

_LINEAR = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def uniform_(t: Tensor, low: float = 0.0, high: float = 1.0) -> None:
    rebind(t, random.uniform(low, high, t.shape, t.dtype))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> None:
    rebind(t, random.normal(mean, std, t.shape, t.dtype))


def fill_(t: Tensor, value: float) -> None:
    rebind(t, _wrap(commit(jnp.full(t.shape, value, t.dtype), like=t._data)))  # t's alone


def zeros_(t: Tensor) -> None:
    fill_(t, 0.0)


def ones_(t: Tensor) -> None:
    fill_(t, 1.0)


def fan_in_uniform_(t: Tensor, fan_in: int) -> None:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for Linear and Conv (MegEngine
    draws N(0, 1 / fan_in) and zero biases, as this project's layers do)."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    uniform_(t, -bound, bound)


_GROUPED: dict[int, weakref.ref] = {}  # id -> a weakref to the weight, dropped as it dies
_GROUPED_LOCK = threading.Lock()


def mark_grouped(weight: Tensor) -> None:
    """Record that `weight` is a grouped convolution's (groups, a, b, *kernel) weight, whose
    fans leave out the groups axis."""
    key = id(weight)

    def forget(_: weakref.ref, key: int = key) -> None:
        with _GROUPED_LOCK:
            _GROUPED.pop(key, None)

    with _GROUPED_LOCK:
        _GROUPED[key] = weakref.ref(weight, forget)


def _is_grouped(tensor: Tensor) -> bool:
    ref = _GROUPED.get(id(tensor))
    return ref is not None and ref() is tensor


def calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight: (in, out) of a Linear's (out, in) weight; for a
    convolution's (out, in, *kernel) weight each is multiplied by the kernel's size, and a
    grouped one's (groups, out / groups, in / groups, *kernel) counts one group."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise bad_argument(f"calculate_fan_in_and_fan_out: a weight of shape {shape} has no "
                           "fans; it needs at least 2 axes (out, in, *kernel).")
    if _is_grouped(tensor):
        shape = shape[1:]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain that keeps activations' variance for `nonlinearity`: 1 for linear layers and
    sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + slope**2)) for leaky_relu (slope
    `param`, default 0.01)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise bad_argument(f"calculate_gain: the negative slope must be a number, got "
                               f"{param!r}.")
        return math.sqrt(2.0 / (1 + slope**2))
    raise bad_argument(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; use one of "
                       f"{', '.join(_LINEAR)}, tanh, relu, leaky_relu.")


def calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    """The fan `mode` ("fan_in" or "fan_out") of a weight."""
    if mode not in ("fan_in", "fan_out"):
        raise bad_argument(f"calculate_correct_fan: mode must be 'fan_in' or 'fan_out', got "
                           f"{mode!r}.")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> None:
    """U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> None:
    """N(0, std**2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _msra_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    return calculate_gain(nonlinearity, a) / math.sqrt(calculate_correct_fan(tensor, mode))


def msra_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                  nonlinearity: str = "leaky_relu") -> None:
    """U(-b, b), b = sqrt(3) * gain / sqrt(fan) (He et al., 2015; PyTorch's
    `kaiming_uniform_`); `a` is leaky_relu's negative slope."""
    bound = math.sqrt(3.0) * _msra_std(tensor, a, mode, nonlinearity)
    uniform_(tensor, -bound, bound)


def msra_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                 nonlinearity: str = "leaky_relu") -> None:
    """N(0, std**2), std = gain / sqrt(fan) (PyTorch's `kaiming_normal_`)."""
    normal_(tensor, 0.0, _msra_std(tensor, a, mode, nonlinearity))
