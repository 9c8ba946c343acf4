"""Reading ahead what the last run of the same command loaded.

A second run of a script loads every executable its first run compiled, one at a time where
each is first needed: a detector's warm first step spent about a third of its time reading
and linking executables (0.5-1.7 s of FCOS's 1.6-2.9 s on 2 cores). Yet which entries a run
will need is known: the ones the last run of the same command (its working directory and
arguments) read or wrote, in that order. So at its exit a process writes that list to
`<cache dir>/preload/<hash of the command>.txt`, and the next run, at its first use of the
cache (its first eager op, usually while it builds the model), starts reading those entries on
the compile pool. `store.read` then takes an entry read ahead, or reads it itself if no pool
thread has started on it yet; each is verified as any other read, and an entry no longer there
is just not found.

Only in a process with one device that runs alone (the only kind that uses the cache's own
entries), and only with a pool (`PARTIAL_COMPILE_THREADS` above 1).
"""

from __future__ import annotations

import atexit
import contextlib
import functools as ft
import hashlib
import os
import sys
from pathlib import Path

from . import compile_pool, store

_FOLDER = "preload"
_MOST = 4000  # entries read ahead at most (a list is a few hundred lines for a detector)
_state: dict[str, str | None] = {"dir": None}


def list_path(directory: str) -> Path:
    """Where the list of this command's entries lives in the cache `directory`."""
    command = repr((os.getcwd(), sys.argv))
    return Path(directory, _FOLDER, hashlib.sha256(command.encode()).hexdigest()[:16] + ".txt")


def start(directory: str) -> None:
    """Read ahead, on the compile pool, the entries the last run of this command used."""
    if _state["dir"] == directory:
        return
    _state["dir"] = directory
    if not compile_pool.parallel() or not store.one_device():
        return
    try:
        names = list_path(directory).read_text().splitlines()[:_MOST]
    except (OSError, UnicodeDecodeError):
        return
    root = Path(directory)
    for name in names:
        path = root / name
        if ".." in Path(name).parts or path in store.preloaded:  # only the cache's own files
            continue
        store.preloaded[path] = compile_pool.Task(ft.partial(store._load, path)).result


def _write() -> None:
    """At exit: the entries this process read or wrote, for the next run of its command."""
    directory = _state["dir"]
    if directory is None or not store.used:
        return
    names = []
    for path in store.used:
        with contextlib.suppress(ValueError):
            names.append(str(path.relative_to(directory)))
    target = list_path(directory)
    with contextlib.suppress(OSError):
        target.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text("\n".join(names[:_MOST]) + "\n")
        os.replace(tmp, target)


store.first_use.append(start)
atexit.register(_write)
