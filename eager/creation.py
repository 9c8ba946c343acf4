"""Tensor creation: zeros, ones, full, arange, eye, the *_like forms, from_dlpack."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .tensor import Tensor, constant, to_array


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A Tensor from a Python number or list, a numpy or jax array, or a Tensor."""
    return Tensor(data, dtype=dtype, device=device)


def full(shape: Any, value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of `shape` filled with `value` (float32 for Python floats)."""
    if dtype is None:
        dtype = np.asarray(value).dtype if isinstance(value, (np.ndarray, np.generic)) else (
            "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32")
    return Tensor(constant(lambda: jnp.full(_shape(shape), value, np.dtype(dtype))), device=device)


def zeros(shape: Any, dtype: Any = "float32", device: Any = None) -> Tensor:
    return Tensor(constant(lambda: jnp.zeros(_shape(shape), np.dtype(dtype))), device=device)


def ones(shape: Any, dtype: Any = "float32", device: Any = None) -> Tensor:
    return Tensor(constant(lambda: jnp.ones(_shape(shape), np.dtype(dtype))), device=device)


def _placement(t: Tensor) -> Any:
    """Where a `*_like` result goes: `t`'s layout when it spans several devices (a replicated
    parameter's optimizer state stays replicated), else the default device."""
    sharding = t.sharding
    return sharding if sharding is not None and len(sharding.device_set) > 1 else None


def zeros_like(t: Tensor, dtype: Any = None) -> Tensor:
    return zeros(t.shape, dtype or t.dtype, device=_placement(t))


def ones_like(t: Tensor, dtype: Any = None) -> Tensor:
    return ones(t.shape, dtype or t.dtype, device=_placement(t))


def full_like(t: Tensor, value: Any, dtype: Any = None) -> Tensor:
    return full(t.shape, value, dtype or t.dtype, device=_placement(t))


def arange(start: float = 0, stop: float | None = None, step: float = 1,
           dtype: Any = "float32", device: Any = None) -> Tensor:
    """Evenly spaced values in [start, stop), float32 by default as in MegEngine."""
    if stop is None:
        start, stop = 0, start
    return Tensor(constant(lambda: jnp.arange(start, stop, step, dtype=np.dtype(dtype))),
                  device=device)


def eye(n: int, m: int | None = None, dtype: Any = "float32", device: Any = None) -> Tensor:
    return Tensor(constant(lambda: jnp.eye(n, m, dtype=np.dtype(dtype))), device=device)


def from_dlpack(obj: Any) -> Tensor:
    """A Tensor sharing memory with a DLPack-capable object (torch tensors, numpy arrays)."""
    return Tensor(jax.dlpack.from_dlpack(obj))


__all__ = ["tensor", "full", "zeros", "ones", "zeros_like", "ones_like", "full_like", "arange",
           "eye", "from_dlpack", "to_array"]
