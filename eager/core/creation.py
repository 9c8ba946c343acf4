"""Tensor creation: zeros, ones, full, arange, linspace, eye, the *_like forms, from_dlpack."""

from __future__ import annotations

import functools as ft
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from . import host_values, ragged_forms
from .context import current
from .errors import OpTypeError
from .op_errors import bad_argument, check_range, checked_shape
from .ops.persistent import Kept
from .tensors import Tensor, constant, made, to_array

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from .device import DeviceLike

Shape = int | Sequence[int]  # one size, or one per axis


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def tensor(data: Any, dtype: DTypeLike | None = None, device: DeviceLike = None) -> Tensor:
    """A Tensor from a Python number or list, a numpy or jax array, or a Tensor."""
    return Tensor(data, dtype=dtype, device=device)


def full(shape: Shape, value: Any, dtype: DTypeLike | None = None, device: DeviceLike = None
         ) -> Tensor:
    """A tensor of `shape` filled with `value` (float32 for Python floats)."""
    if np.asarray(value).dtype.kind in "OUSmM" or np.ndim(value) != 0:
        raise bad_argument(f"full: the fill value must be a number, got {value!r:.60}.",
                           OpTypeError)
    if dtype is None:
        dtype = np.asarray(value).dtype if isinstance(value, (np.ndarray, np.generic)) else (
            "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32")
    return _filled(shape, value, dtype, device)


def zeros(shape: Shape, dtype: DTypeLike = "float32", device: DeviceLike = None) -> Tensor:
    return _filled(shape, 0, dtype, device)


def ones(shape: Shape, dtype: DTypeLike = "float32", device: DeviceLike = None) -> Tensor:
    return _filled(shape, 1, dtype, device)


def _filled(shape: Any, value: Any, dtype: DTypeLike, device: DeviceLike) -> Tensor:
    """A tensor of `shape` filled with `value`; ragged when its first size is a ragged
    tensor's length (`F.zeros_like(selected)`, `F.full((len(rois), 1), i)`)."""
    checked = checked_shape(shape, dtype)

    def make(storage: tuple) -> Tensor:
        return made(constant(lambda: _full_array(storage, value, np.dtype(dtype))),
                    device=device)

    out = ragged_forms.made(shape, lambda storage: make(checked_shape(storage, dtype)))
    return make(checked) if out is None else out


def _full_array(shape: tuple, value: Any, dtype: np.dtype) -> Any:
    """`jnp.full(shape, value, dtype)`. Outside a trace, made on the host and put on the device
    where numpy fills with the same bits and the array is small (`host_values`: no program to
    compile in a new process); other scalar fills run a program kept on disk with the
    persistent cache (jax would lower its own each process)."""
    if current() is not None or not _scalar(value):
        return jnp.full(shape, value, dtype)
    fill = host_values.fill_value(shape, value, dtype)
    if fill is not None:
        return jax.device_put(np.full(shape, fill))
    return _full_program(tuple(operator.index(d) for d in shape), dtype.name)(value)


@ft.lru_cache(maxsize=1024)
def _full_program(shape: tuple, dtype: str) -> Kept:
    return Kept("full", lambda value: jnp.full(shape, value, np.dtype(dtype)), (shape, dtype))


def _scalar(value: Any) -> bool:
    """A value a program can take as an argument and fill with as `jnp.full` would."""
    if type(value) is int:
        return -(2 ** 31) <= value < 2 ** 31
    return type(value) in (bool, float) or isinstance(value, np.generic)


def _placement(t: Tensor) -> Any:
    """Where a `*_like` result goes: `t`'s layout when it spans several devices (a replicated
    parameter's optimizer state stays replicated), else the default device."""
    sharding = t.sharding
    return sharding if sharding is not None and len(sharding.device_set) > 1 else None


def zeros_like(t: Tensor, dtype: DTypeLike | None = None) -> Tensor:
    return zeros(t.shape, dtype or t.dtype, device=_placement(t))


def ones_like(t: Tensor, dtype: DTypeLike | None = None) -> Tensor:
    return ones(t.shape, dtype or t.dtype, device=_placement(t))


def full_like(t: Tensor, value: Any, dtype: DTypeLike | None = None) -> Tensor:
    return full(t.shape, value, dtype or t.dtype, device=_placement(t))


def arange(start: float = 0, stop: float | None = None, step: float = 1,
           dtype: DTypeLike = "float32", device: DeviceLike = None) -> Tensor:
    """Evenly spaced values in [start, stop), float32 by default as in MegEngine."""
    if stop is None:
        start, stop = 0, start
    check_range(start, stop, step, dtype)
    return made(constant(lambda: _arange_array(start, stop, step, np.dtype(dtype))),
                device=device)


def _arange_array(start: Any, stop: Any, step: Any, dtype: np.dtype) -> Any:
    """`jnp.arange`; outside a trace, for plain numbers, made on the host where numpy computes
    the same bits (`host_values`), else through a program kept on disk with the persistent
    cache."""
    bounds = (start, stop, step)
    if current() is not None or not all(type(v) in (int, float) for v in bounds):
        return jnp.arange(start, stop, step, dtype=dtype)
    values = host_values.arange_values(start, stop, step, dtype)
    if values is not None:
        return jax.device_put(values)
    return _arange_program(bounds, dtype.name)()


@ft.lru_cache(maxsize=1024)
def _arange_program(bounds: tuple, dtype: str) -> Kept:
    start, stop, step = bounds
    return Kept("arange", lambda: jnp.arange(start, stop, step, dtype=np.dtype(dtype)),
                (bounds, dtype))


def linspace(start: float, stop: float, num: int, dtype: DTypeLike = "float32",
             device: DeviceLike = None) -> Tensor:
    """`num` evenly spaced values from `start` to `stop`, both included (MegEngine's
    `linspace`; float32 by default).

    >>> linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    try:
        num = operator.index(num)
    except TypeError:
        raise bad_argument(f"linspace: num must be an int, got {num!r:.40}", OpTypeError) from None
    checked_shape((num,), dtype)
    # in float64 on the host, so that ends and exact steps stay exact; integers truncate
    # toward zero as MegEngine's (and PyTorch's) do
    host = np.linspace(float(start), float(stop), num).astype(np.dtype(dtype))
    return made(constant(lambda: jnp.asarray(host)), device=device)


def eye(n: int, m: int | None = None, dtype: DTypeLike = "float32",
        device: DeviceLike = None) -> Tensor:
    checked_shape((n, n if m is None else m), dtype)
    return made(constant(lambda: jnp.eye(n, m, dtype=np.dtype(dtype))), device=device)


def from_dlpack(obj: Any) -> Tensor:
    """A Tensor sharing memory with a DLPack-capable object (torch tensors, numpy arrays)."""
    return Tensor(jax.dlpack.from_dlpack(obj))


__all__ = ["tensor", "full", "zeros", "ones", "zeros_like", "ones_like", "full_like", "arange",
           "linspace", "eye", "from_dlpack", "to_array"]
