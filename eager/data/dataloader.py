"""`DataLoader`: batches from a dataset, in the loader's process or in worker processes, with
MegEngine 1.13's arguments and batches (lists of numpy arrays, dtypes kept; with `preload`,
Tensors already on the device). Beyond MegEngine: augmentations repeat for a seed whatever
`num_workers` is, and `state_dict()` / `load_state_dict()` resume a run on the batch it was at.
"""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import random as eager_random
from . import workers
from .collator import Collator
from .dataset import Dataset, StreamDataset
from .device_prefetch import Prefetcher
from .fetch import Job, Task
from .sampler import (
    Infinite,
    MapSampler,
    Position,
    SequentialSampler,
    StreamSampler,
    rng_state_of,
    tracked_batches,
)
from .transform import PseudoTransform, Transform

logger = logging.getLogger(__name__)


class DataLoader:
    """Iterate `dataset` in batches: the `sampler` picks each batch's indices (default: one
    sample at a time, in order), `transform` changes each sample, `collator` stacks them.

    `num_workers > 0` makes batches in that many worker processes (forked; see
    `eager/data/workers.py`); `timeout` (seconds, 0: none) bounds the wait for one of them.
    `preload=True` makes the next batch and copies it to the device while the current step
    runs, and yields Tensors. For a `StreamDataset`, the loader reads the stream and workers
    transform; with `parallel_stream=True` each worker reads its own stream (which can split
    itself with `eager.data.get_worker_info()`).

    >>> import numpy as np
    >>> from eager.data import ArrayDataset, DataLoader, RandomSampler
    >>> data = ArrayDataset(np.arange(10, dtype="float32").reshape(5, 2), np.arange(5))
    >>> [x.shape for x, y in DataLoader(data, RandomSampler(data, 2, seed=0))]
    [(2, 2), (2, 2), (1, 2)]
    """

    def __init__(self, dataset: Any, sampler: Any = None, transform: Transform | None = None,
                 collator: Collator | None = None, num_workers: int = 0, timeout: float = 0,
                 preload: bool = False, parallel_stream: bool = False) -> None:
        if num_workers < 0:
            raise ValueError("num_workers should not be negative")
        if num_workers and not workers.can_fork():
            logger.warning("this platform cannot fork worker processes: loading in the "
                           "loader's process (num_workers=0), as MegEngine does on Windows")
            num_workers = 0
        if timeout < 0:
            raise ValueError("timeout should not be negative")
        self.dataset = dataset
        self.num_workers = num_workers
        self.timeout = timeout
        self.preload = preload
        self.parallel_stream = parallel_stream
        self.transform = transform if transform is not None else PseudoTransform()
        self.collator = collator if collator is not None else Collator()
        if isinstance(dataset, StreamDataset):
            self.sampler = sampler if sampler else StreamSampler(batch_size=1)
            if not isinstance(self.sampler, StreamSampler):
                raise TypeError(f"a StreamDataset is read with a StreamSampler, not "
                                f"{type(self.sampler).__name__}")
            if not parallel_stream and num_workers > 1:
                logger.warning("the loader's process reads the whole stream: set "
                               "parallel_stream=True to have each worker read its own")
            self.datakind = "stream"
        else:
            if not isinstance(dataset, Dataset):
                raise TypeError(f"DataLoader reads a Dataset or StreamDataset, not "
                                f"{type(dataset).__name__}")
            self.sampler = sampler if sampler else SequentialSampler(dataset, batch_size=1)
            if not isinstance(self.sampler, MapSampler):
                raise TypeError(f"a map Dataset is read with a MapSampler, not "
                                f"{type(self.sampler).__name__}")
            self.datakind = "map"
        self.seed = _seed_of(self.sampler)
        self._position = Position(0, 0, None)
        self._pending: Position | None = None

    def __len__(self) -> int:
        if isinstance(self.sampler, StreamSampler):
            raise TypeError("a StreamDataset's loader has no length: its stream decides")
        return len(self.sampler)

    def __iter__(self) -> LoaderIterator:
        source = self._stream_source() if self.datakind == "stream" else self._map_source()
        return LoaderIterator(self, Prefetcher(source) if self.preload else source)

    # ----- resuming ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: the epoch, the batches of it already given out, the sampler's
        generator as the epoch began, and the seed of the augmentations. Save it with the
        model; `load_state_dict` makes the next iteration continue with the next batch.
        (Batches a worker made ahead and the loop never got are made again.)"""
        if self.datakind == "stream":
            raise TypeError("a StreamDataset's loader has no position to save: its stream is "
                            "the dataset's own (save what the stream needs to resume instead)")
        p = self._position
        state = p.rng_state if p.batch or p.rng_state else rng_state_of(_inner(self.sampler))
        return {"epoch": p.epoch, "batch": p.batch, "seed": self.seed,
                "sampler_rng": _encode_rng(state)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state` (from `state_dict`) at the next iteration."""
        self.seed = int(state["seed"])
        self._pending = Position(int(state["epoch"]), int(state["batch"]),
                                 _decode_rng(state.get("sampler_rng")))
        self._position = self._pending

    # ----- sources: iterators of (position after the batch, batch) ---------------------------
    def _start(self) -> Position:
        if self._pending is not None:
            start, self._pending = self._pending, None
            return start
        p = self._position
        if isinstance(self.sampler, Infinite):
            return p  # an Infinite sampler goes on where the last iteration stopped
        return Position(p.epoch + 1 if p.batch else p.epoch, 0, None)

    def _key(self, position: Position) -> tuple[int, int, int]:
        return (getattr(self.sampler, "rank", 0), position.epoch, position.batch)

    def _map_source(self) -> Iterator[tuple[Position, Any]]:
        batches = tracked_batches(self.sampler, self._start())
        tasks = ((p, Task(self._key(p), indices=list(i))) for p, i in batches)
        if self.num_workers == 0:
            job = Job(self.dataset, self.transform, self.collator, self.seed)
            return ((p, job(t)) for p, t in tasks)
        return self._in_workers(tasks, own_stream=False)

    def _stream_source(self) -> Iterator[tuple[Position, Any]]:
        self._position = Position(self._start().epoch, 0, None)
        epoch, size = self._position.epoch, self.sampler.batch_size
        job = Job(self.dataset, self.transform, self.collator, self.seed, size)
        if self.num_workers and self.parallel_stream:
            own = ((Position(epoch, n, None), Task((0, epoch, n))) for n in itertools.count(1))
            return self._in_workers(own, own_stream=True, job=job)
        stream = iter(self.dataset)
        read = ((Position(epoch, n, None),
                 Task((0, epoch, n), samples=list(itertools.islice(stream, size))))
                for n in itertools.count(1))
        tasks = itertools.takewhile(lambda t: len(t[1].samples or ()) == size, read)
        if self.num_workers == 0:
            return ((p, job(t)) for p, t in tasks)
        return self._in_workers(tasks, own_stream=False, job=job)

    def _in_workers(self, tasks: Iterator[tuple[Position, Task]], own_stream: bool,
                    job: Job | None = None) -> Iterator[tuple[Position, Any]]:
        job = job or Job(self.dataset, self.transform, self.collator, self.seed)
        n = self.num_workers
        pool = workers.WorkerPool(lambda i: job.in_worker(i, n, own_stream), n, self.timeout)
        try:
            pending: collections.deque[tuple[int, Position]] = collections.deque()
            ids = itertools.count()

            def feed() -> None:
                for position, task in itertools.islice(tasks, 1):
                    task_id = next(ids)
                    if pool.submit(task_id, task):
                        pending.append((task_id, position))

            for _ in range(2 * n):
                feed()
            while pending:
                task_id, position = pending.popleft()
                batch = pool.result(task_id)
                feed()
                if not isinstance(batch, workers.Exhausted):
                    yield position, batch
        finally:
            pool.close()


class LoaderIterator:
    """One pass over a DataLoader (one epoch; without end for an `Infinite` sampler or a
    stream). Dropping it (`break`, an exception, the end) stops its worker processes."""

    def __init__(self, loader: DataLoader, source: Iterator[tuple[Position, Any]]) -> None:
        self._loader = loader
        self._source = source

    def __iter__(self) -> LoaderIterator:
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        try:
            position, batch = next(self._source)
        except StopIteration:
            p = self._loader._position
            if self._loader.datakind == "map":
                self._loader._position = Position(p.epoch + 1, 0, None)
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        self._loader._position = position
        return batch

    def close(self) -> None:
        """Stop making batches: the workers exit, their shared memory is freed."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()

    def __del__(self) -> None:
        self.close()


def _inner(sampler: Any) -> Any:
    return sampler.sampler if isinstance(sampler, Infinite) else sampler


def _seed_of(sampler: Any) -> int:
    """The augmentations' seed: the sampler's, or one drawn from `eager.random` (so that
    `eg.random.seed(s)` makes the augmentations repeat, as MegEngine's loader draws from
    `megengine.random`)."""
    seed = getattr(sampler, "seed", None)
    if seed is not None:
        return int(seed) % 2**63
    key = np.asarray(eager_random.get_state().numpy(), dtype=np.uint64)
    return int(key[0] << np.uint64(31) ^ key[-1]) % 2**63


def _encode_rng(state: dict[str, Any] | None) -> dict[str, Any] | None:
    if state is None:
        return None
    return {"key": np.asarray(state["state"]["key"], np.uint32), "pos": int(state["state"]["pos"]),
            "has_gauss": int(state["has_gauss"]), "gauss": float(state["gauss"])}


def _decode_rng(saved: dict[str, Any] | None) -> dict[str, Any] | None:
    if saved is None:
        return None
    return {"bit_generator": "MT19937",
            "state": {"key": np.asarray(saved["key"], np.uint32), "pos": int(saved["pos"])},
            "has_gauss": int(saved["has_gauss"]), "gauss": float(saved["gauss"])}
