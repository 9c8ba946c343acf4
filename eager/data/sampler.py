"""Samplers: which sample indices make each batch, as MegEngine's `megengine.data.sampler`.

A map sampler yields lists of indices (one list per batch); with `world_size > 1` each rank
takes every `world_size`-th index of the epoch's order, starting at its rank (the order padded
by its own head to a multiple of `world_size`), so the ranks' shards are disjoint and equal in
size. Without `world_size`/`rank`, a process in an `eager.distributed` group gets the group's.
Random samplers draw from their own `numpy.random.RandomState(seed)`, in MegEngine's order of
draws, so a seed gives MegEngine's index sequence.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .. import distributed as dist


class Sampler(ABC):
    """The base of all samplers."""

    @abstractmethod
    def __init__(self) -> None:
        """Samplers take their configuration here."""


class MapSampler(Sampler):
    """Batches of indices into a map-style dataset (`Dataset`); subclasses define `sample()`,
    the epoch's order of indices, and may override `scatter` (the rank's share) or `batch`."""

    def __init__(self, dataset: Any, batch_size: int = 1, drop_last: bool = False,
                 num_samples: int | None = None, world_size: int | None = None,
                 rank: int | None = None, seed: int | None = None) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        in_group = dist.is_distributed()
        self.world_size = world_size if world_size is not None else (
            dist.get_world_size() if in_group else 1)
        self.rank = rank if rank is not None else (dist.get_rank() if in_group else 0)
        total = len(dataset) if num_samples is None else num_samples
        self.num_samples = int(math.ceil(total / self.world_size))
        if self.num_samples < self.batch_size:
            raise ValueError(f"num_samples should be greater than batch_size, but got "
                             f"num_samples={self.num_samples} and batch_size={batch_size}")
        if seed is None and self.world_size > 1:
            seed = 0  # every rank must draw the same order for the shards to be disjoint
        self.seed = seed
        self.rng = np.random.RandomState(seed)

    def __iter__(self) -> Iterator[list[Any]]:
        return self.batch()

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return int(math.ceil(self.num_samples / self.batch_size))

    def sample(self) -> Sequence[Any] | Iterator[Any]:
        """All indices of one epoch, in order (before the ranks' split)."""
        raise NotImplementedError

    def scatter(self, indices: list[Any]) -> list[Any]:
        """This rank's share of the epoch's `indices`: every `world_size`-th from `rank`, after
        padding the list with its own head to `num_samples * world_size`."""
        total, given = self.num_samples * self.world_size, len(indices)
        indices = indices + indices[:total - given]
        if len(indices) != total:
            raise ValueError(
                f"{type(self).__name__}: {given} indices cannot make {self.world_size} "
                f"equal shards of num_samples={self.num_samples} (set from len(dataset)="
                f"{len(self.dataset)}); with world_size > 1, give between half of and as many "
                "indices as the dataset has, or split them yourself and pass world_size=1")
        return indices[self.rank:total:self.world_size]

    def batch(self) -> Iterator[list[Any]]:
        """The epoch's batches of indices."""
        indices = list(self.sample())
        if self.world_size > 1:
            indices = self.scatter(indices)
        for start in range(0, len(indices), self.batch_size):
            chunk = indices[start:start + self.batch_size]
            if len(chunk) == self.batch_size or not self.drop_last:
                yield chunk


def _check_indices(indices: Any) -> None:
    if indices is not None and not isinstance(indices, collections.abc.Sequence):
        raise ValueError(f"indices should be None or a sequence, but got indices={indices}")


class SequentialSampler(MapSampler):
    """Indices in order: `range(len(dataset))`, or the given `indices`."""

    def __init__(self, dataset: Any, batch_size: int = 1, drop_last: bool = False,
                 indices: Sequence[Any] | None = None, world_size: int | None = None,
                 rank: int | None = None) -> None:
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank)
        _check_indices(indices)
        self.indices = indices

    def sample(self) -> Sequence[Any] | Iterator[Any]:
        return iter(range(len(self.dataset))) if self.indices is None else self.indices


class RandomSampler(MapSampler):
    """A new random permutation of the indices (or of `indices`) every epoch."""

    def __init__(self, dataset: Any, batch_size: int = 1, drop_last: bool = False,
                 indices: Sequence[Any] | None = None, world_size: int | None = None,
                 rank: int | None = None, seed: int | None = None) -> None:
        super().__init__(dataset, batch_size, drop_last, None, world_size, rank, seed)
        _check_indices(indices)
        self.indices = indices

    def sample(self) -> list[Any]:
        if self.indices is None:
            return self.rng.permutation(len(self.dataset)).tolist()
        return self.rng.permutation(self.indices).tolist()


class ReplacementSampler(MapSampler):
    """Indices drawn with replacement, uniformly or by (unnormalized) `weights`."""

    def __init__(self, dataset: Any, batch_size: int = 1, drop_last: bool = False,
                 num_samples: int | None = None, weights: Sequence[float] | None = None,
                 world_size: int | None = None, rank: int | None = None,
                 seed: int | None = None) -> None:
        super().__init__(dataset, batch_size, drop_last, num_samples, world_size, rank, seed)
        self.weights: np.ndarray | None = None
        if weights is not None:
            if not isinstance(weights, collections.abc.Sequence):
                raise ValueError(f"weights should be None or a sequence, but got "
                                 f"weights={weights}")
            if len(weights) != len(dataset):
                raise ValueError(f"len(dataset)={len(dataset)} should be equal to "
                                 f"len(weights)={len(weights)}")
            self.weights = np.array(weights) / sum(weights)

    def sample(self) -> list[Any]:
        size = self.num_samples * self.world_size
        return self.rng.choice(len(self.dataset), size=size, replace=True,
                               p=self.weights).tolist()


class Infinite(MapSampler):
    """Wraps a map sampler to repeat it without end: a new epoch of it starts when one ends.
    Attributes not found here are the wrapped sampler's (`batch_size`, `rng`, ...)."""

    def __init__(self, sampler: MapSampler) -> None:
        self.sampler = sampler
        self.sampler_iter = iter(sampler)

    def sample(self) -> Sequence[Any]:
        raise NotImplementedError("Infinite has no sample(): it repeats its sampler's batches")

    def __iter__(self) -> Infinite:
        return self

    def __next__(self) -> list[Any]:
        try:
            return next(self.sampler_iter)
        except StopIteration:
            self.sampler_iter = iter(self.sampler)
            return next(self.sampler_iter)

    def __len__(self) -> int:
        return int(np.iinfo(np.int64).max)

    def __getattr__(self, name: str) -> Any:
        if name == "sampler":  # not set yet (unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.sampler, name)


class StreamSampler(Sampler):
    """Batches for a `StreamDataset`: `batch_size` consecutive samples of its stream. Each rank
    reads its own stream (the dataset's `__iter__` may split by `dist.get_rank()`)."""

    def __init__(self, batch_size: int = 1) -> None:
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        return self.batch()

    def batch(self) -> Iterator[list[int]]:
        """Batches of `batch_size` stream positions, without end."""
        positions = self.sample()
        while True:
            yield list(itertools.islice(positions, self.batch_size))

    def sample(self) -> Iterator[int]:
        return itertools.count(start=0)


@dataclasses.dataclass(frozen=True, eq=False)  # the generator state holds an array
class Position:
    """Where a loader is in its sampler's stream of batches: epoch (pass over the sampler)
    `epoch`, `batch` batches into it, the sampler's generator as it was when the pass began."""

    epoch: int
    batch: int
    rng_state: dict[str, Any] | None


def rng_state_of(sampler: Any) -> dict[str, Any] | None:
    """The state of `sampler.rng` (a numpy RandomState), or None if it has none."""
    rng = getattr(sampler, "rng", None)
    return rng.get_state(legacy=False) if isinstance(rng, np.random.RandomState) else None


def tracked_batches(sampler: Any, start: Position) -> Iterator[tuple[Position, list[Any]]]:
    """The sampler's batches from `start`, each with the position just after it: one pass of
    a map sampler, every pass of an `Infinite` one (its passes counted as epochs). `start`'s
    generator state, where it has one, is set first; its first `start.batch` batches are
    drawn and skipped (indices only: no data is read)."""
    inner = sampler.sampler if isinstance(sampler, Infinite) else sampler
    epoch, skip, state = start.epoch, start.batch, start.rng_state
    while True:
        if state is not None:
            inner.rng.set_state(state)
        began = rng_state_of(inner)
        n = 0
        for n, indices in enumerate(iter(inner), 1):
            if n > skip:
                yield Position(epoch, n, began), indices
        if not isinstance(sampler, Infinite) or n == 0:
            return
        epoch, skip, state = epoch + 1, 0, None
