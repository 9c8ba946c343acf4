"""The random source of data transforms: one generator per batch, so augmentations repeat.

MegEngine's transforms draw from numpy's global generator, which makes them depend on which
worker process ran them and in what order. Here a transform draws from `rng()`: inside a
`DataLoader` that is a `numpy.random.RandomState` seeded from the loader's seed, the epoch and
the batch's position in the epoch (the same whatever `num_workers` is); outside a loader it is
numpy's global generator, so `np.random.seed(s)` followed by `transform.apply(x)` draws exactly
what MegEngine draws.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np

_local = threading.local()


def rng() -> np.random.RandomState:
    """The generator the calling transform draws from (see the module's docstring)."""
    current = getattr(_local, "generator", None)
    if current is None:
        return np.random.mtrand._rand
    return current


def sample_seed(seed: int, *key: int) -> np.random.SeedSequence:
    """The seed of the draws identified by `key` (a loader's: rank, epoch, batch) under the
    loader's `seed`; every part a non-negative integer."""
    return np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, *key])


@contextlib.contextmanager
def drawing_from(seed: np.random.SeedSequence) -> Iterator[np.random.RandomState]:
    """Make `rng()` in this thread a generator seeded by `seed` for the block's duration."""
    previous = getattr(_local, "generator", None)
    _local.generator = np.random.RandomState(np.random.MT19937(seed))
    try:
        yield _local.generator
    finally:
        _local.generator = previous
