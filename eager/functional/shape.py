"""Shape and movement functions (MegEngine signatures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops import OPS
from ..tensor import Tensor, _shape_arg, apply


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def reshape(x: Any, shape: Sequence[int]) -> Tensor:
    """`x` with a new shape; one entry may be -1."""
    return _t(x).reshape(shape)


def flatten(x: Any, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    """Merge axes start_axis..end_axis into one."""
    return _t(x).flatten(start_axis, end_axis)


def transpose(x: Any, pattern: Sequence[int]) -> Tensor:
    """Permute the axes of `x` by `pattern`."""
    return _t(x).transpose(*pattern)


def expand_dims(x: Any, axis: int | Sequence[int]) -> Tensor:
    """Insert length-1 axes at `axis` (an int or a list)."""
    return apply(OPS["expand_dims"], x, axis=_shape_arg((axis,)) if isinstance(axis, int)
                 else _shape_arg(axis))


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove length-1 axes (all of them, or those in `axis`)."""
    axis = None if axis is None else _shape_arg((axis,) if isinstance(axis, int) else axis)
    return apply(OPS["squeeze"], x, axis=axis)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    return apply(OPS["broadcast_to"], x, shape=_shape_arg(shape))


def concat(inps: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    return apply(OPS["concat"], *inps, axis=int(axis))


def stack(inps: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along a new axis."""
    return apply(OPS["stack"], *inps, axis=int(axis))


def split(x: Any, nsplits_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split into `n` equal parts (an int) or at the given indices (a list), as MegEngine."""
    x = _t(x)
    if isinstance(nsplits_or_sections, (int, np.integer)):
        n = int(nsplits_or_sections)
        if x.shape[axis] % n:
            raise ValueError(f"split: axis {axis} of size {x.shape[axis]} is not divisible by {n}")
        size = x.shape[axis] // n
        indices = tuple(size * i for i in range(1, n))
    else:
        indices = tuple(int(i) for i in nsplits_or_sections)
    return list(apply(OPS["split"], x, indices=indices, axis=int(axis)))


def tile(x: Any, reps: Sequence[int]) -> Tensor:
    return apply(OPS["tile"], x, reps=_shape_arg(reps))


def repeat(x: Any, repeats: int, axis: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `axis` (flattened if None)."""
    return apply(OPS["repeat"], x, repeats=int(repeats), axis=axis)


def gather(x: Any, axis: int, index: Any) -> Tensor:
    """out[i][j] = x[index[i][j]][j] for axis 0 (PyTorch's gather)."""
    return apply(OPS["gather"], x, index, axis=int(axis))


def scatter(x: Any, axis: int, index: Any, source: Any) -> Tensor:
    """A copy of x with out[index[i][j]][j] = source[i][j] for axis 0 (PyTorch's scatter)."""
    return apply(OPS["scatter"], x, index, source, axis=int(axis))


def indexing_one_hot(src: Any, index: Any, axis: int = 1, keepdims: bool = False) -> Tensor:
    """Pick, along `axis`, the element at `index` (one per position): src[i, index[i]]."""
    return apply(OPS["indexing_one_hot"], src, index, axis=int(axis), keepdims=keepdims)


def one_hot(x: Any, num_classes: int, dtype: Any = "float32") -> Tensor:
    """One-hot encoding of integer `x` along a new last axis."""
    return apply(OPS["one_hot"], x, num_classes=int(num_classes), dtype=np.dtype(dtype))


_PAD_MODES = {"constant": "constant", "edge": "edge", "replicate": "edge", "reflect": "reflect",
              "symmetric": "symmetric"}


def pad(x: Any, pad_width: Sequence[Sequence[int]], mode: str = "constant",
        constant_value: float = 0.0) -> Tensor:
    """Pad with (before, after) widths per axis; modes constant, edge/replicate, reflect."""
    if mode not in _PAD_MODES:
        raise ValueError(f"pad: unknown mode {mode!r}; use one of {sorted(_PAD_MODES)}")
    widths = tuple((int(a), int(b)) for a, b in pad_width)
    return apply(OPS["pad"], x, pad_width=widths, mode=_PAD_MODES[mode],
                 constant_value=float(constant_value))

__all__ = [
    "reshape", "flatten", "transpose", "expand_dims", "squeeze", "broadcast_to", "concat",
    "stack", "split", "tile", "repeat", "gather", "scatter", "indexing_one_hot", "one_hot", "pad",
]
