"""Making one batch: read the samples, transform them, collate them (in the loader's process
or a worker's). A batch's random draws come from a generator seeded by the loader's seed and
the batch's (rank, epoch, batch) key, so they do not depend on which process makes it."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from .sample_rng import drawing_from, sample_seed


@dataclass(frozen=True)
class Task:
    """One batch to make: the sample indices of a map dataset or the raw samples of a stream
    (None: a `parallel_stream` worker reads them from its own stream), and the batch's key."""

    key: tuple[int, ...]
    indices: list[Any] | None = None
    samples: list[Any] | None = None


class WorkerInfo:
    """What a `StreamDataset` sees through `get_worker_info()` in a worker process: `idx`,
    the worker's number; `worker`, how many there are; `seed`, the worker's seed."""

    def __init__(self, idx: int, worker: int, seed: int) -> None:
        self.idx, self.worker, self.seed = idx, worker, seed

    def __repr__(self) -> str:
        return f"WorkerInfo(idx={self.idx}, worker={self.worker}, seed={self.seed})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, which worker this is (see `WorkerInfo`); else None.
    A `StreamDataset` read with `parallel_stream=True` can split its stream with it."""
    return _worker_info


class Job:
    """Makes batches for one process: `Job(...)(task)` returns the collated batch."""

    def __init__(self, dataset: Any, transform: Any, collator: Any, seed: int,
                 batch_size: int = 1) -> None:
        self.dataset, self.transform, self.collator = dataset, transform, collator
        self.seed, self.batch_size = seed, batch_size
        self._stream: Any = None

    def __call__(self, task: Task) -> Any:
        with drawing_from(sample_seed(self.seed, *task.key)):
            if task.indices is not None:
                samples = [self.dataset[i] for i in task.indices]
                return self.collator.apply(self.transform.apply_batch(samples))
            samples = task.samples if task.samples is not None else self._read_own_stream()
            return self.collator.apply([self.transform.apply(s) for s in samples])

    def _read_own_stream(self) -> list[Any]:
        samples = []
        for _ in range(self.batch_size):
            try:
                samples.append(next(self._stream))
            except StopIteration:
                break
        if not samples:
            raise StopIteration
        return samples

    def in_worker(self, worker_id: int, num_workers: int, own_stream: bool = False) -> Job:
        """Prepare this job to run in worker `worker_id` (called in the worker, after fork):
        seed numpy's and Python's global generators per worker, as MegEngine does, so code
        that draws from them directly does not repeat across workers; start its own stream."""
        global _worker_info
        seed = (self.seed + worker_id) % 2**32
        random.seed(seed)
        np.random.seed(seed)
        _worker_info = WorkerInfo(worker_id, num_workers, seed)
        _limit_opencv_threads()
        if own_stream:
            self._stream = iter(self.dataset)
        return self


def _limit_opencv_threads() -> None:
    """One OpenCV thread per worker: the workers are the parallelism, and OpenCV's thread pool
    inherited through fork can hang (OpenCV's own advice)."""
    cv2.setNumThreads(1)
