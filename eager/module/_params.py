"""Helpers every parametrized layer shares: per-axis sizes and fan-in-initialized parameters."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..creation import zeros
from ..tensors import Parameter
from . import init

Ints = int | Sequence[int]  # a size of every spatial axis, or one per axis


def _tuple(v: Ints, n: int) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, (int, np.integer)) else tuple(int(i) for i in v)


def _param(shape: Sequence[int], fan_in: int) -> Parameter:
    p = Parameter(zeros(shape))
    init.fan_in_uniform_(p, fan_in)
    return p
