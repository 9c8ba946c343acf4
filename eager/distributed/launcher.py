"""`launcher`: run a function in several processes of this host, each a rank of one process
group, and collect their return values (MegEngine's `megengine.distributed.launcher`).

Processes are spawned (never forked: jax's threads do not survive a fork). The parent waits for
every rank's result; the first worker that raises or dies ends the run: the others are
terminated (they may be blocked in a collective with the dead one) and the call raises
`WorkerError` with that worker's traceback. Workers also exit when the parent disappears, so no
process is left behind.

Preemption: a SIGTERM to the launching process (Kubernetes stops a pod by signalling its first
process; a scheduler may signal only the job's main process) is passed on to every rank, so
each rank's own SIGTERM handler runs (typically raising SystemExit so that `finally:` saves a
checkpoint). The launcher then waits up to `term_grace` seconds for the ranks to finish before
it stops them, and takes the SIGTERM itself last: its previous handler runs, or, without one,
the process ends as a SIGTERM ends it. A rank that gets a SIGTERM of its own (a scheduler that
signals every process) and exits ends the run like any failing rank: the launcher raises
`WorkerError`, and the other ranks are sent SIGTERM (their handlers run) and killed if they have
not ended 5 seconds later.
"""

from __future__ import annotations

import functools as ft
import importlib
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..core.errors import WorkerError
from .group import check_port, free_port, init_process_group

_POLL = 0.1  # seconds between looks at the workers while waiting for results
_GRACE = 2.0  # seconds a dead worker's result may take to arrive through the queue
_TERM_GRACE = 30.0  # seconds the ranks get to finish (save a checkpoint) after a SIGTERM


class Launcher:
    """`func` run by `world_size` ranks; call it like `func`. See `launcher`."""

    def __init__(self, func: Callable, n_gpus: int | None = None, world_size: int | None = None,
                 rank_start: int = 0, master_ip: str = "localhost", port: int = 0,
                 term_grace: float = _TERM_GRACE):
        ft.update_wrapper(self, func)
        self.func = func
        self.n_gpus = n_gpus or 2
        self.world_size = world_size or self.n_gpus
        self.rank_start, self.master_ip, self.port = rank_start, master_ip, port
        self.term_grace = term_grace

    def __reduce__(self) -> Any:
        # A decorated module-level function is found again by name in the worker (pickling
        # `func` by name would find this Launcher instead and fail).
        found = _find(self.func.__module__, self.func.__qualname__)
        if found is self:
            return _find, (self.func.__module__, self.func.__qualname__)
        return Launcher, (self.func, self.n_gpus, self.world_size, self.rank_start,
                          self.master_ip, self.port, self.term_grace)

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        port = self.port or free_port(self.master_ip)
        if self.rank_start == 0:
            check_port(self.master_ip, port)
        ranks = range(self.rank_start, self.rank_start + self.n_gpus)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        # Not daemonic: a rank may start processes of its own (a DataLoader's workers), which
        # a daemonic process may not; `_stop` below and `_exit_with` in each rank already see
        # to it that no rank outlives the launcher.
        procs = {r: ctx.Process(target=_worker, daemon=False, name=f"rank{r}", args=(
            self, r, self.world_size, self.master_ip, port, r - self.rank_start, args, kwargs,
            results, os.getpid())) for r in ranks}
        forward = _Forward(list(procs.values()))
        try:
            with forward:
                for p in procs.values():
                    p.start()
                values = _collect(procs, results)
        finally:
            _stop(procs.values(), self.term_grace if forward.got else 0.0)
            if forward.got:  # the launcher's own SIGTERM, now that the ranks have ended
                signal.raise_signal(signal.SIGTERM)
        return [values[r] for r in ranks]


class _Forward:
    """While the block runs (in the main thread: only it may set handlers), a SIGTERM to this
    process is sent on to every started rank instead of ending the launcher; `got` says
    whether one came. Waiting for the results goes on, so the ranks' handlers can finish."""

    def __init__(self, procs: list) -> None:
        self.procs, self.got = procs, False
        self.previous: Any = None  # the SIGTERM handler to put back, as signal.signal gave it

    def __enter__(self) -> _Forward:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._forward)
        return self

    def _forward(self, signum: int, frame: Any) -> None:
        self.got = True
        for p in self.procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signum)

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def launcher(func: Callable | None = None, *, n_gpus: int | None = None,
             world_size: int | None = None, rank_start: int = 0, master_ip: str = "localhost",
             port: int = 0, term_grace: float = _TERM_GRACE) -> Any:
    """Decorate `func` so that calling it runs it in `n_gpus` processes of this host (default
    2 on CPU), ranks `rank_start ...` of a group of `world_size` (default `n_gpus`), each with
    its process group initialised; returns their return values in rank order.

    `port=0` picks a free port for the coordinator. The function and its arguments are pickled
    into the workers: define it at the top level of a module. A SIGTERM to this process reaches
    every rank's handler; the ranks get `term_grace` seconds to finish (see the module's note).

        @dist.launcher(n_gpus=2)
        def train(steps):
            ...
            return dist.get_rank()

        train(10)  # [0, 1]
    """
    options: dict[str, Any] = {"n_gpus": n_gpus, "world_size": world_size,
                               "rank_start": rank_start, "master_ip": master_ip, "port": port,
                               "term_grace": term_grace}
    if func is None:
        return lambda f: Launcher(f, **options)
    return Launcher(func, **options)


def _find(module: str, qualname: str) -> Any:
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj


def _collect(procs: dict[int, Any], results: Any) -> dict[int, Any]:
    """Every rank's value; raises `WorkerError` at the first worker that raised or died."""
    values: dict[int, Any] = {}
    dead_since: dict[int, float] = {}
    while len(values) < len(procs):
        try:
            rank, ok, payload = results.get(timeout=_POLL)
        except queue.Empty:
            _check_alive(procs, values, dead_since)
            continue
        if not ok:
            raise WorkerError(f"worker rank {rank} raised:\n{payload}")
        values[rank] = pickle.loads(payload)
    return values


def _check_alive(procs: dict[int, Any], values: dict, dead_since: dict[int, float]) -> None:
    now = time.monotonic()
    for rank, p in procs.items():
        if rank in values or p.is_alive():
            continue
        # Its last message may still be in the queue's pipe: give it a moment.
        if now - dead_since.setdefault(rank, now) > _GRACE:
            code = p.exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise WorkerError(f"worker rank {rank} {how} before returning a value (no Python "
                              f"traceback: the process itself died, e.g. out of memory or "
                              f"os._exit)")


def _stop(procs: Any, grace: float) -> None:
    """Wait up to `grace` seconds for the ranks to end by themselves (after a SIGTERM their
    handlers may be saving), terminate (SIGTERM) whatever still runs, then kill what ignores
    that."""
    procs = [p for p in procs if p.pid is not None]  # not those a failed start left unstarted
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.0))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()


def _worker(target: Any, rank: int, world_size: int, master_ip: str, port: int, device: int,
            args: tuple, kwargs: dict, results: Any, parent: int) -> None:
    threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()
    try:
        init_process_group(master_ip, port, world_size, rank, device)
        func = target.func if isinstance(target, Launcher) else target
        results.put((rank, True, pickle.dumps(func(*args, **kwargs))))
    except BaseException:  # noqa: BLE001  (every failure goes back to the parent, with its traceback)
        results.put((rank, False, traceback.format_exc()))
        results.close()
        results.join_thread()
        os._exit(1)


def _exit_with(parent: int) -> None:
    """End this worker when its parent is gone (no orphans if the launcher is killed): first
    as a SIGTERM ends it, so its handler may save, then for good after the grace."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(_TERM_GRACE)
    os._exit(1)
