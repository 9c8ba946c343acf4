"""Walking a batch: the containers a collator makes (dicts, namedtuples, lists, tuples) around
its arrays."""

from __future__ import annotations

import collections.abc
from collections.abc import Callable
from typing import Any


def map_leaves(batch: Any, fn: Callable[[Any], Any], is_leaf: Callable[[Any], bool]) -> Any:
    """`batch` with every leaf for which `is_leaf` holds replaced by `fn(leaf)`; containers
    keep their type (a namedtuple stays one), and other values stay as they are."""
    if is_leaf(batch):
        return fn(batch)
    if isinstance(batch, collections.abc.Mapping):
        return {k: map_leaves(v, fn, is_leaf) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(map_leaves(v, fn, is_leaf) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_leaves(v, fn, is_leaf) for v in batch)
    return batch
