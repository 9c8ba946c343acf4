"""The worker processes of a DataLoader (`num_workers > 0`).

Workers are forked, as MegEngine's and PyTorch's are, so a dataset or transform defined in
the training script (a lambda, a class in `__main__`) works unpickled and a worker starts in a
few milliseconds. (grain, evaluated for this, spawns its workers: 4.5-5 s before the first
batch of every epoch in a process that imports jax, see DESIGN.md.) A worker runs numpy and
OpenCV only, never jax, so jax's threads, which the fork does not copy, are not missed.

Tasks go round-robin to per-worker queues, at most `2 * num_workers` ahead of the loader;
results come back on one queue, out of order, and the pool hands them out in task order. A
worker's exception comes back as itself with its traceback as the cause; a worker that dies
or a batch that takes longer than `timeout` raises `DataLoaderError` naming the worker. Every
exit path (exhaustion, an exception, `break`, Ctrl-C, garbage collection, interpreter exit)
stops the workers and removes the pool's shared memory.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import pickle
import queue
import signal
import time
import traceback
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from . import shared_arrays
from .errors import DataLoaderError, DataLoaderTimeoutError, WorkerTraceback

_POLL_S = 0.2  # how often a waiting loader checks its workers are alive
_JOIN_S = 2.0  # how long a stopping worker gets before it is terminated

Job = Callable[[Any], Any]


def can_fork() -> bool:
    """Whether this platform starts processes by fork (not Windows)."""
    return "fork" in multiprocessing.get_all_start_methods()


class Exhausted:
    """A worker's answer when its own stream (`parallel_stream`) has ended."""


def _worker_loop(worker_id: int, make_job: Callable[[int], Job], tasks: Any, results: Any,
                 directory: str | None) -> None:
    _reset_signal_handlers()
    parent = os.getppid()
    job = make_job(worker_id)
    while os.getppid() == parent:
        try:
            message = tasks.get(timeout=1.0)
        except queue.Empty:
            continue
        if message is None:
            return
        task_id, task = message
        try:
            answer: Any = ("ok", shared_arrays.share(job(task), directory))
        except StopIteration:
            answer = ("exhausted", None)
        except Exception as e:  # noqa: BLE001 - every failure is sent back to the loader
            answer = ("error", _portable(e, worker_id))
        results.put(_packed((task_id, worker_id) + answer, worker_id))


def _reset_signal_handlers() -> None:
    """The training script's Python signal handlers (a SIGTERM handler that saves a checkpoint,
    say) are not the worker's to run: the fork copied them, so each goes back to the system's
    default. Ctrl-C, which a terminal sends to every process of the group, is ignored: the
    loader's process handles it and stops the workers."""
    for signum in signal.valid_signals():
        try:
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # signals that cannot be caught or that Python skips
            continue
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _packed(message: tuple, worker_id: int) -> bytes:
    """`message` pickled here: a queue pickles in a thread of its own, which prints and drops
    what fails to pickle, and the loader would wait for that batch for ever."""
    try:
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - sent back as the batch's error
        error = DataLoaderError(
            f"DataLoader worker {worker_id} made a batch it cannot send back: {e} (a class "
            "defined inside a function, a lambda or an open file in the sample? define the "
            "class at module level, or convert the sample in the transform or collator)")
        return pickle.dumps(message[:2] + ("error", (pickle.dumps(error), "")))


def _portable(e: Exception, worker_id: int) -> tuple[bytes | None, str]:
    """(the pickled exception if it pickles and unpickles, the worker's traceback text)."""
    text = f"in DataLoader worker {worker_id} (pid {os.getpid()}):\n" + "".join(
        traceback.format_exception(type(e), e, e.__traceback__))
    try:
        data = pickle.dumps(e)
        pickle.loads(data)
    except Exception:  # noqa: BLE001 - anything unpicklable travels as text
        return None, text
    return data, text


class WorkerPool:
    """`num_workers` forked processes running `make_job(worker_id)(task)` on submitted tasks."""

    def __init__(self, make_job: Callable[[int], Job], num_workers: int,
                 timeout: float = 0) -> None:
        ctx = multiprocessing.get_context("fork")
        self.timeout = timeout
        self._directory = shared_arrays.new_directory()
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(num_workers)]
        self._workers = [ctx.Process(
            target=_worker_loop, name=f"DataLoader worker {i}", daemon=True,
            args=(i, make_job, self._tasks[i], self._results, self._directory))
            for i in range(num_workers)]
        self._urgent = [False]  # set when a worker failed: terminate at once, do not wait
        self._closer = weakref.finalize(self, _stop, self._workers, self._tasks,
                                        self._results, self._directory, self._urgent)
        with warnings.catch_warnings():  # jax warns of fork; the workers never call jax
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            for w in self._workers:
                w.start()
        self.active = set(range(num_workers))
        self._cycle = itertools.cycle(range(num_workers))
        self._owner: dict[int, tuple[int, Any]] = {}
        self._done: dict[int, tuple] = {}

    def submit(self, task_id: int, task: Any) -> bool:
        """Queue `task` on the next worker still running; False if none is."""
        for _ in range(len(self._workers)):
            worker = next(self._cycle)
            if worker in self.active:
                self._owner[task_id] = (worker, task)
                self._tasks[worker].put((task_id, task))
                return True
        return False

    def result(self, task_id: int) -> Any:
        """The result of task `task_id` (an `Exhausted` if its worker's stream ended);
        raises what the task raised, or `DataLoaderError` if its worker died or timed out."""
        deadline = time.monotonic() + self.timeout if self.timeout > 0 else None
        while task_id not in self._done:
            try:
                done = self._results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check(task_id, deadline)
                continue
            message = pickle.loads(done)
            self._done[message[0]] = message[1:]
        worker, kind, payload = self._done.pop(task_id)
        self._owner.pop(task_id, None)
        if kind == "ok":
            return shared_arrays.receive(payload)
        if kind == "exhausted":
            self._retire(worker)
            return Exhausted()
        self.close()
        raise _reraise(*payload)

    def _check(self, task_id: int, deadline: float | None) -> None:
        dead = [(i, w) for i, w in enumerate(self._workers)
                if i in self.active and not w.is_alive()]
        if dead:
            self.close(urgent=True)
            killed = any(w.exitcode == -signal.SIGKILL for _, w in dead)
            raise DataLoaderError("DataLoader worker(s) exited unexpectedly: " + ", ".join(
                f"worker {i} (pid {w.pid}, {_how(w.exitcode)})" for i, w in dead)
                + (". A worker killed by SIGKILL is often one the system ran out of memory "
                   "for: try fewer workers or smaller batches" if killed else ""))
        if deadline is not None and time.monotonic() > deadline:
            worker, task = self._owner.get(task_id, (None, None))
            pid = self._workers[worker].pid if worker is not None else None
            self.close(urgent=True)
            raise DataLoaderTimeoutError(
                f"DataLoader timed out after {self.timeout} s waiting for worker {worker} "
                f"(pid {pid}) to finish the batch of {_describe(task)}; raise "
                "DataLoader(timeout=...) if the batch is just slow, or look for what blocks "
                "in the dataset's __getitem__ or the transform")

    def _retire(self, worker: int) -> None:
        self.active.discard(worker)
        self._tasks[worker].put(None)

    def close(self, urgent: bool = False) -> None:
        """Stop the workers and free the shared memory (idempotent); `urgent`: terminate
        them at once instead of letting them finish their batch."""
        self._urgent[0] = self._urgent[0] or urgent
        self._closer()


def _stop(workers: list, tasks: list, results: Any, directory: str | None,
          urgent: list[bool]) -> None:
    if urgent[0]:
        for w in workers:
            if w.is_alive():
                w.terminate()
    for q, w in zip(tasks, workers):
        if w.is_alive():
            with contextlib.suppress(OSError, ValueError):  # a queue already closed
                q.put(None)
    deadline = time.monotonic() + _JOIN_S
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
        if w.is_alive():
            w.terminate()
            w.join(1.0)
        if w.is_alive():
            w.kill()
            w.join()
    for q in (*tasks, results):
        q.cancel_join_thread()
        q.close()
    shared_arrays.remove_directory(directory)


def _reraise(data: bytes | None, text: str) -> BaseException:
    if data is not None:
        error = pickle.loads(data)
        if text:
            error.__cause__ = WorkerTraceback(text)
        return error
    return DataLoaderError(f"a DataLoader worker raised an exception that does not pickle; "
                           f"its traceback:\n{text}")


def _how(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name} ({exitcode})"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _describe(task: Any) -> str:
    indices = getattr(task, "indices", None)
    if indices is None:
        return "a stream batch"
    shown = ", ".join(map(str, list(indices)[:8]))
    return f"indices [{shown}{', ...' if len(indices) > 8 else ''}]"
