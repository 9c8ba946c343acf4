"""Argument helpers shared by the functional modules: each takes an argument as a user passes
it and returns it in the form an op takes, or raises this project's error naming the function
and the argument."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import OpTypeError
from ..core.index_checks import host_values
from ..core.op_errors import bad_argument
from ..core.tensors import Tensor

if TYPE_CHECKING:
    from typing_extensions import TypeIs

_COMPUTE_MODES = ("default", "float32")


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _is_int(v: Any) -> TypeIs[int | np.integer]:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _pair(v: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, int) else tuple(int(i) for i in v)


def _ints(fn: str, name: str, v: Any, n: int) -> tuple[int, ...]:
    """An int or a sequence of `n` ints (a Tensor too) as a tuple of `n` ints."""
    values = np.asarray(host_values(v) if isinstance(v, Tensor) else v)
    if values.dtype.kind not in "iu" or values.ndim > 1 or values.size not in (1, n):
        raise bad_argument(f"{fn}: {name} must be an int or {n} ints, got {v!r:.80}.",
                           OpTypeError)
    return tuple(int(i) for i in np.broadcast_to(values.reshape(-1), (n,)))


def _float_input(fn: str, x: Tensor, what: str = "input") -> None:
    if np.dtype(x.dtype).kind not in "fV":  # V: bfloat16
        raise bad_argument(f"{fn}: the {what} has dtype {np.dtype(x.dtype)}; it must be a float "
                           "tensor: convert it with .astype('float32').", OpTypeError)


def _compute_mode(fn: str, mode: str) -> None:
    """MegEngine's `compute_mode` ("default" or "float32": float16 products accumulated in
    float32, which XLA does anyway)."""
    if mode not in _COMPUTE_MODES:
        raise bad_argument(f"{fn}: compute_mode must be one of {_COMPUTE_MODES}, got {mode!r}.")
