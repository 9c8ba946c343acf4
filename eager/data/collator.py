"""Merging a list of transformed samples into one batch, as MegEngine's `Collator` does."""

from __future__ import annotations

import collections.abc
from typing import Any

import numpy as np


class Collator:
    """Stack samples into a batch: arrays and numpy scalars become one array with a leading
    batch axis (dtype kept), Python floats float64 and ints int64 arrays; strings and bytes
    stay as given (a list, or a tuple inside a sequence); dicts, namedtuples and sequences are
    collated field by field (a sequence becomes a list). Subclass and override `apply` for
    another merge (padding boxes, say).

    >>> Collator().apply([(np.zeros(2, "uint8"), 1), (np.ones(2, "uint8"), 0)])[0].shape
    (2, 2)
    """

    def apply(self, inputs: collections.abc.Sequence[Any]) -> Any:
        first = inputs[0]
        if isinstance(first, np.ndarray):
            if first.dtype.kind == "O":
                raise TypeError(_unsupported(f"arrays of dtype {first.dtype}"))
            return np.ascontiguousarray(np.stack(inputs))
        if isinstance(first, np.generic) and not isinstance(first, (np.str_, np.bytes_)):
            return np.array(inputs)
        if isinstance(first, float):
            return np.array(inputs, dtype=np.float64)
        if isinstance(first, int):  # bool included, as MegEngine's
            return np.array(inputs)
        if isinstance(first, (str, bytes)):
            return inputs
        if isinstance(first, collections.abc.Mapping):
            return {key: self.apply([sample[key] for sample in inputs]) for key in first}
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*(self.apply(field) for field in zip(*inputs)))
        if isinstance(first, collections.abc.Sequence):
            return [self.apply(field) for field in zip(*inputs)]
        raise TypeError(_unsupported(type(first).__name__))


def _unsupported(what: str) -> str:
    return (f"Collator: cannot stack {what}; samples may hold numpy arrays, numbers, strings, "
            "bytes, dicts and sequences of them (pass DataLoader(collator=...) to merge "
            "other types)")
