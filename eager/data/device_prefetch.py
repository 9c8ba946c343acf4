"""`DataLoader(preload=True)`: the next batch is made and copied to the device while the
current step runs.

A thread pulls batches from the loader's source one ahead of the training loop and starts
their host-to-device copy (`jax.device_put`, which returns before the copy ends); the loop
gets Tensors. The thread runs numpy, OpenCV and jax's transfer, which release the GIL for
their work, so it overlaps the step's compute. Position and randomness are the source's: a
batch's content does not depend on when the thread made it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from ..core.device import default as default_device
from ..core.tensors import Tensor
from .batch_tree import map_leaves

_DONE = object()


def to_device(batch: Any) -> Any:
    """`batch` with every numpy array replaced by a jax array being copied to the default
    device (lists, tuples, namedtuples and dicts are walked; other leaves stay)."""
    device = default_device()
    return map_leaves(batch, lambda a: jax.device_put(a, device),
                      lambda leaf: isinstance(leaf, np.ndarray))


def as_tensors(batch: Any) -> Any:
    """`batch` (from `to_device`) with its jax arrays wrapped as Tensors (no copy)."""
    return map_leaves(batch, Tensor, lambda leaf: isinstance(leaf, jax.Array))


class Prefetcher:
    """Runs `source` (an iterator of (position, batch)) in a thread, `depth` batches ahead,
    copying each batch to the device; iterate it for (position, batch) with Tensors."""

    def __init__(self, source: Iterator[tuple[Any, Any]], depth: int = 1) -> None:
        self._source = source
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="DataLoader prefetch",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for position, batch in self._source:
                if not self._put((position, to_device(batch))):
                    return
            self._put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the loop, raised there
            self._put(e)
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> tuple[Any, Any]:
        item = self._queue.get()
        if item is _DONE:
            self._queue.put(_DONE)  # a later next() ends too
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        position, batch = item
        return position, as_tensors(batch)

    def close(self) -> None:
        """Stop the thread and the source (idempotent)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
