"""Range checks of integer indices, made on the host in eager code.

jax clamps an index out of range, or fills with nan, silently: `x[idx]` returns the last row, a
gather gives nan, a scatter drops the write. An eager op that takes indices therefore reads them
once (one device sync, as PyTorch does on CPU) and raises `OpIndexError` naming the op, the bad
index, the valid range and the user's line. Inside a capture (`partial_trace`, `xla_trace`, a
region with breaks) the values are not known and nothing is checked: what jax does holds there.

>>> import numpy as np
>>> check_range("gather", np.array([0, 5]), 3, "index")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
eager.core.errors.OpIndexError: gather: index 5 is out of range for a size of 3; ...
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .context import current
from .errors import OpIndexError
from .op_errors import bad_argument
from .tensor_methods import TensorMethods


def host_values(x: Any) -> np.ndarray:
    """The values of `x` (labels, indices) as numpy, for checks on the host: this process's
    part when they are sharded over processes (possibly empty)."""
    if not isinstance(x, TensorMethods):
        return np.asarray(x)
    array = x._data
    if getattr(array, "is_fully_addressable", True):
        return np.asarray(array)
    parts = [np.asarray(s.data).ravel() for s in array.addressable_shards]
    return np.concatenate(parts) if parts else np.zeros(0, array.dtype)


def check_range(fn: str, index: Any, n: int, what: str, negative: bool = False,
                size: str = "") -> None:
    """Raise `OpIndexError` when an integer `index` of op `fn` lies outside [0, n) (or
    [-n, n) with `negative`, as Python indexing allows); `size` describes n for the message
    ("10 classes"). Nothing in a capture."""
    if current() is not None:
        return
    host = host_values(index)
    if host.dtype.kind not in "iu" or host.size == 0:
        return
    lo = -n if negative else 0
    if negative or host.dtype.kind == "u":
        low, high = int(host.min()), int(host.max())
        if lo <= low and high < n:
            return
    # one reduction instead of min and max: read as unsigned, a negative index is huge
    elif int(host.view(f"u{host.dtype.itemsize}").max()) < n:
        return
    else:
        low, high = int(host.min()), int(host.max())
    bad = low if low < lo else high
    raise bad_argument(f"{fn}: {what} {bad} is out of range for {size or f'a size of {n}'}; "
                       f"each {what} must lie in [{lo}, {n - 1}].", OpIndexError)
