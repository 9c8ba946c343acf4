"""The threads that compile executables while the step goes on (decision 20 of the design).

A model's first step compiles hundreds of XLA programs: every eager op's forward and backward,
every segment's training forward and backward (25-70 ms each for small ones on a 2-core CPU,
seconds for a segment). Many do not depend on each other: a segment's backward is not run
before its forward has run and the step has gone on to its loss, an eager op's backward not
before the whole forward pass. XLA's compile releases the GIL, so independent compiles run on
a pool of threads beside the step's own Python (which traces and lowers them first: jax's
settings are per thread, and a trace error belongs where the user's code runs).

One pool serves the process, sized by the environment variable `PARTIAL_COMPILE_THREADS` (a
positive int; 1 is strictly serial: no pool at all, everything compiles in the caller's thread
where it always did), by default the CPUs this process may run on. Its threads start on the
first submit; a forked child gets a pool of its own (the parent's threads are not copied). A
thread that needs a result no pool thread has started runs the work itself (`Task`).

Measured on 2 cores: a small eager CNN's first training step, 2.15 -> 1.68 s (its ops'
backward programs compile during the forward pass); a ResNet-ish segment's, 2.49 -> 2.40 s,
within noise: XLA:CPU already compiles one large program on about 1.8 of the 2 cores. And
XLA:CPU's compiles largely wait for each other: a 0.09 s program compiled while a 2.4 s one
compiles on another thread took 0.6-1.7 s (jaxlib 0.10.2, 2 cores; the same with parallel
codegen split 1 or the older emitters). Why: XLA:CPU generates every program's machine code on
one process-wide pool of codegen threads (one per core), first come first served, so a small
compile's kernels queue behind all those a large one queued before them. Per-thread CPU time
shows it: FCOS's 2.4 s backward compiled on one thread and four small programs (0.44 s alone)
on another spent their codegen on the same two pool threads, and the small ones took 1.1-2.4 s;
giving the large compile's thread the lowest priority (nice 19) changed nothing, since the
pool's threads do the work. What the pool buys is the caller's Python and the step's running
going on beside a compile, not two compiles at once; a compile the step needs now can wait
behind one it needs later (RetinaNet's backward behind its loss stretches').

So a compile is started either for a thread to wait on soon (a segment's training forward) or
ahead of need (a segment's backward, eager ops' backward programs, an optimizer's update:
`Task(job, ahead=True)`). Those started ahead run one at a time on a thread of their own, and
each starts only while no compile someone needs now is going on (`needed_now`, around every
compile outside that thread): they fill the time the step spends in Python and running instead
of slowing the compile the step waits for. RetinaNet's backbone stretch compiled alone: forward
2.75 s, backward 2.15 s; at once: 4.56 and 3.53 s. Eager RetinaNet's cold first step, whose
ops' forward programs compile in the step's thread beside their backward programs: 17.4 ->
16.0 s (medians of 3, alternated); with graph breaks, RetinaNet's and Faster R-CNN's the same
within noise (each step needs its backward compiles before it ends either way).

A compile started here is awaited at its first use (`Compiling`): an error it raised is raised
there, with its own type and traceback, and the next use compiles again in the using thread.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from . import store

ENV = "PARTIAL_COMPILE_THREADS"
T = TypeVar("T")

_threads: list[int] = []  # the size, read from the environment once
_pool: list[ThreadPoolExecutor] = []
_ahead: list[ThreadPoolExecutor] = []  # the one thread that runs compiles started ahead
_lock = [threading.Lock()]  # (in a list: a forked child replaces it, in case it was held)
_needed = [0]  # compiles going on that a thread needs now
_quiet = [threading.Condition()]  # notified when none is left
_local = threading.local()  # `ahead`: this thread runs a compile started ahead


def threads() -> int:
    """How many executables compile at once: `PARTIAL_COMPILE_THREADS`, else the CPUs this
    process may use. Read once per process (`reset` reads it again)."""
    if not _threads:
        _threads.append(_configured())
    return _threads[0]


def _configured() -> int:
    value = os.environ.get(ENV, "").strip()
    if not value:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        return max(1, len(cpus) if cpus else os.cpu_count() or 1)
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{ENV}={value!r}: expected a positive int (1: compile serially, in "
                         f"the thread that needs the executable)")
    return count


def parallel() -> bool:
    """Whether compiles may run on the pool (more than one thread is configured)."""
    return threads() > 1


def reset() -> None:
    """Let the pool go (its threads end once idle) and forget the configured size: the next
    compile starts a new pool, sized from the environment as it is then."""
    with _lock[0]:
        for pool in (_pool, _ahead):
            if pool:
                pool.pop().shutdown(wait=False)
        _threads.clear()


def _forked() -> None:
    """In a forked child: the parent's pool has no threads here (work submitted to it would
    wait forever), and its lock may have been held; both are made anew."""
    _lock[0] = threading.Lock()
    _quiet[0] = threading.Condition()
    _needed[0] = 0
    _pool.clear()
    _ahead.clear()


os.register_at_fork(after_in_child=_forked)


def _executor(ahead: bool = False) -> ThreadPoolExecutor:
    pool = _ahead if ahead else _pool
    with _lock[0]:
        if not pool:
            pool.append(ThreadPoolExecutor(max_workers=1 if ahead else threads(),
                                           thread_name_prefix="partial-compile" + "-ahead" * ahead))
        return pool[0]


@contextlib.contextmanager
def needed_now() -> Iterator[None]:
    """Around a compile: unless it runs on the thread of compiles started ahead, a thread
    needs it now, and no compile started ahead starts until it is done."""
    if getattr(_local, "ahead", False):
        yield
        return
    quiet = _quiet[0]
    with quiet:
        _needed[0] += 1
    try:
        yield
    finally:
        with quiet:
            _needed[0] -= 1
            if not _needed[0]:
                quiet.notify_all()


def _when_quiet(run: Callable[[], None]) -> None:
    """`run()` on the thread of compiles started ahead, once no compile needed now is going
    on (a thread that needs the result meanwhile runs it itself: `Task`)."""
    quiet = _quiet[0]
    with quiet:
        quiet.wait_for(lambda: not _needed[0])
    _local.ahead = True
    try:
        run()
    finally:
        _local.ahead = False


class Task(Generic[T]):
    """`job()` started on the pool (`ahead`: on the thread of compiles started ahead of need),
    or run by the first thread that needs its result if no pool thread has started it yet (a
    thread never waits for work queued behind others: the step's backward, needing its last
    op's program first, compiles it itself).

    The job counts loads from jax's own cache (`store.jax_hits`, thread-local) from the count
    of the thread that submitted it, so a store's check that an executable was compiled anew
    (`SegmentStore.save`) says in a pool thread what it would have said in the caller's."""

    __slots__ = ("_job", "_hits", "_lock", "_claimed", "_done", "_value", "_error")

    def __init__(self, job: Callable[[], T], ahead: bool = False):
        self._job, self._hits = job, store.jax_hits.count
        self._lock = threading.Lock()
        self._claimed = 0  # the process whose thread runs it (a forked child runs it again)
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        with contextlib.suppress(RuntimeError):  # the interpreter is exiting: run when needed
            if ahead:
                _executor(ahead=True).submit(_when_quiet, self._run)
            else:
                _executor().submit(self._run)

    def _run(self) -> None:
        with self._lock:  # whoever comes first runs it: a pool thread or one that waits
            if self._done.is_set() or self._claimed == os.getpid():
                return
            self._claimed = os.getpid()
        try:
            self._value = _counted_from(self._hits, self._job)
        except BaseException as e:  # noqa: BLE001 - kept, raised again where it is needed
            self._error = e
        finally:
            self._done.set()

    def error(self) -> BaseException | None:
        """The error the job raised, or None once it returned (runs or waits for it)."""
        self._run()
        self._done.wait()
        return self._error

    def result(self) -> T:
        """What the job returned; what it raised is raised here, its traceback kept."""
        error = self.error()
        if error is not None:
            raise error
        return self._value  # type: ignore[return-value]


def _counted_from(hits: int, job: Callable[[], T]) -> T:
    """`job()` with this thread's count of jax's cache hits starting at `hits`; afterwards the
    thread's own count, plus the hits of the job (which happened in this thread)."""
    before = store.jax_hits.count
    store.jax_hits.count = hits
    try:
        return job()
    finally:
        store.jax_hits.count = before + store.jax_hits.count - hits


class Compiling:
    """Stands for a `jax.stages.Compiled` being compiled on the pool (`task`): the first use
    waits for it (or compiles it, if no pool thread has started) and then calls it directly.
    Should the compile have failed, that use raises its error (type and traceback as raised
    where it ran), and every later use compiles again with `retry()` in the using thread: it
    raises again, or it works. `valid()`, asked once the compile succeeded, may refuse its
    result: `retry()` then gives the executable."""

    __slots__ = ("_task", "_retry", "_valid", "_lock", "_compiled")

    def __init__(self, task: Task, retry: Callable[[], Any],
                 valid: Callable[[], bool] | None = None):
        self._task: Task | None = task
        self._retry, self._valid = retry, valid
        self._lock = threading.Lock()
        self._compiled: Any = None

    def resolve(self) -> Any:
        """The compiled executable: waits for it the first time (or compiles it again)."""
        compiled = self._compiled
        if compiled is not None:
            return compiled
        with self._lock:
            if self._compiled is None:
                self._compiled = self._finish()
            return self._compiled

    def _finish(self) -> Any:
        task, self._task = self._task, None
        if task is None:  # the compile failed before: compiled again here
            return self._retry()
        compiled = task.result()  # an error is the pool thread's own, raised again here
        if self._valid is not None and not self._valid():
            return self._retry()
        return compiled

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        return (compiled if compiled is not None else self.resolve())(*args)

    def __getattr__(self, name: str) -> Any:  # cost_analysis, as_text, output_shardings, ...
        return getattr(self.resolve(), name)
