"""`launcher`: run a function in several processes of this host, each a rank of one process
group, and collect their return values (MegEngine's `dist.launcher`).

Processes are spawned (never forked: jax's threads do not survive a fork). The parent waits for
every rank's result; the first worker that raises or dies ends the run: the others are
terminated (they may be blocked in a collective with the dead one) and the call raises
`WorkerError` with that worker's traceback. Workers also exit when the parent disappears, so no
process is left behind.
"""

from __future__ import annotations

import functools as ft
import importlib
import multiprocessing
import os
import pickle
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..errors import WorkerError
from .group import check_port, free_port, init_process_group

_POLL = 0.1  # seconds between looks at the workers while waiting for results
_GRACE = 2.0  # seconds a dead worker's result may take to arrive through the queue


class Launcher:
    """`func` run by `world_size` ranks; call it like `func`. See `launcher`."""

    def __init__(self, func: Callable, n_gpus: int | None = None, world_size: int | None = None,
                 rank_start: int = 0, master_ip: str = "localhost", port: int = 0):
        ft.update_wrapper(self, func)
        self.func = func
        self.n_gpus = n_gpus or 2
        self.world_size = world_size or self.n_gpus
        self.rank_start, self.master_ip, self.port = rank_start, master_ip, port

    def __reduce__(self) -> Any:
        # A decorated module-level function is found again by name in the worker (pickling
        # `func` by name would find this Launcher instead and fail).
        found = _find(self.func.__module__, self.func.__qualname__)
        if found is self:
            return _find, (self.func.__module__, self.func.__qualname__)
        return Launcher, (self.func, self.n_gpus, self.world_size, self.rank_start,
                          self.master_ip, self.port)

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        port = self.port or free_port(self.master_ip)
        if self.rank_start == 0:
            check_port(self.master_ip, port)
        ranks = range(self.rank_start, self.rank_start + self.n_gpus)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        procs = {r: ctx.Process(target=_worker, daemon=True, name=f"rank{r}", args=(
            self, r, self.world_size, self.master_ip, port, r - self.rank_start, args, kwargs,
            results, os.getpid())) for r in ranks}
        try:
            for p in procs.values():
                p.start()
            values = _collect(procs, results)
        finally:
            _stop(procs.values())
        return [values[r] for r in ranks]


def launcher(func: Callable | None = None, *, n_gpus: int | None = None,
             world_size: int | None = None, rank_start: int = 0, master_ip: str = "localhost",
             port: int = 0) -> Any:
    """Decorate `func` so that calling it runs it in `n_gpus` processes of this host (default
    2 on CPU), ranks `rank_start ...` of a group of `world_size` (default `n_gpus`), each with
    its process group initialised; returns their return values in rank order.

    `port=0` picks a free port for the coordinator. The function and its arguments are pickled
    into the workers: define it at the top level of a module.

        @dist.launcher(n_gpus=2)
        def train(steps):
            ...
            return dist.get_rank()

        train(10)  # [0, 1]
    """
    options = {"n_gpus": n_gpus, "world_size": world_size, "rank_start": rank_start,
               "master_ip": master_ip, "port": port}
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


def _stop(procs: Any) -> None:
    """Terminate whatever is still running, then kill what ignores that."""
    procs = [p for p in procs if p.pid is not None]  # not those a failed start left unstarted
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
    """End this worker when its parent is gone (no orphans if the launcher is killed)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)
