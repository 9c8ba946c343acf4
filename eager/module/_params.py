"""Helpers every parametrized layer shares: per-axis sizes and MegEngine's initialization of
weights (N(0, 1 / fan_in)) and biases (zeros)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..core.creation import zeros
from ..core.tensors import Parameter
from . import init

Ints = int | Sequence[int]  # a size of every spatial axis, or one per axis


def _tuple(v: Ints, n: int) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, (int, np.integer)) else tuple(int(i) for i in v)


def _param(shape: Sequence[int], fan_in: int) -> Parameter:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's draw (for layers laid out as PyTorch's)."""
    p = Parameter(zeros(shape))
    init.fan_in_uniform_(p, fan_in)
    return p


def _weight(shape: Sequence[int], fan_in: int) -> Parameter:
    """A Linear's or convolution's weight as MegEngine 1.13 draws it: N(0, 1 / fan_in)."""
    p = Parameter(zeros(shape))
    init.normal_(p, 0.0, 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0)
    return p


def _bias(shape: Sequence[int]) -> Parameter:
    """A bias as MegEngine 1.13 starts it: zeros."""
    return Parameter(zeros(shape))
