"""In-place initializers, drawing from the framework generator (`eg.random`)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from .. import random
from ..device import commit
from ..tensors import Tensor, rebind


def uniform_(t: Tensor, low: float = 0.0, high: float = 1.0) -> None:
    rebind(t, random.uniform(low, high, t.shape, t.dtype)._data)


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> None:
    rebind(t, random.normal(mean, std, t.shape, t.dtype)._data)


def fill_(t: Tensor, value: float) -> None:
    rebind(t, commit(jnp.full(t.shape, value, t.dtype), like=t._data))


def zeros_(t: Tensor) -> None:
    fill_(t, 0.0)


def ones_(t: Tensor) -> None:
    fill_(t, 1.0)


def fan_in_uniform_(t: Tensor, fan_in: int) -> None:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's and MegEngine's default for Linear and Conv."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    uniform_(t, -bound, bound)
