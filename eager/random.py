"""The framework's random number generator: one jax PRNG key, held in a Tensor.

Every random op splits the key (`next_key`) and draws with the split-off part, so eager code and a
captured region that draw the same numbers in the same order see bit-identical values: both split
the same key the same way. Because the key is an ordinary Tensor, a capture lifts it as an input
and writes it back like any other state.

>>> import eager as eg
>>> eg.random.seed(0)
>>> a = eg.random.normal(size=(2,))
>>> eg.random.seed(0)
>>> bool((eg.random.normal(size=(2,)) == a).numpy().all())
True
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from .ops import OPS
from .tensor import Tensor, apply, rebind

_key: Tensor | None = None


def _state() -> Tensor:
    global _key
    if _key is None:
        _key = apply(OPS["random_key"], secrets.randbits(31))
    return _key


def seed(n: int) -> None:
    """Reset the generator to a state determined by the integer `n`."""
    global _key
    new = apply(OPS["random_key"], int(n) & 0x7FFFFFFF)
    if _key is None:
        _key = new
    else:
        rebind(_key, new._data)


def get_state() -> Tensor:
    """The Tensor holding the key (uint32, shape (2,)); capture lifts it like any tensor."""
    return _state()


def next_key() -> Tensor:
    """Advance the generator and return a fresh key to draw with."""
    key = _state()
    nxt, sub = apply(OPS["random_split"], key)
    rebind(key, nxt._data)
    return sub


def _shape(size: Any) -> tuple[int, ...]:
    if size is None:
        return ()
    return (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)


def normal(mean: float = 0.0, std: float = 1.0, size: Any = None, dtype: Any = "float32") -> Tensor:
    """Samples from N(mean, std^2) of shape `size`."""
    return apply(OPS["random_normal"], next_key(), mean, std, shape=_shape(size),
                 dtype=np.dtype(dtype))


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None,
            dtype: Any = "float32") -> Tensor:
    """Samples from U[low, high) of shape `size`."""
    return apply(OPS["random_uniform"], next_key(), low, high, shape=_shape(size),
                 dtype=np.dtype(dtype))


def permutation(n: int, dtype: Any = "int32") -> Tensor:
    """A random permutation of range(n)."""
    return apply(OPS["random_permutation"], next_key(), n=int(n), dtype=np.dtype(dtype))
