"""What the cache did for this process: executables loaded, and programs compiled.

Counted from jax's own monitoring events (a backend compile; a hit of jax's cache) and this
project's loads (`store.read`), in every thread. At exit a process that used the cache appends
one line to `<cache dir>/runs.jsonl` (kept to the last `_KEEP` runs), which
`python -m partial.cache` shows: a run that compiles what an earlier run kept says the cache
is being missed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

import jax

from . import cache_location

RUNS = "runs.jsonl"
_KEEP = 50
_COMPILE = "/jax/core/compile/backend_compile_duration"
_JAX_HIT = "/jax/compilation_cache/cache_hits"
_lock = threading.Lock()
_counts = {"loaded": 0, "jax_hits": 0, "compiles": 0, "compile_seconds": 0.0}
_started = time.time()


def loaded() -> None:
    """Count an executable loaded from this project's entries."""
    with _lock:
        _counts["loaded"] += 1


def counts() -> dict[str, Any]:
    """This process's counts so far: `loaded` (this project's entries), `jax_hits` (jax's own
    entries), `compiles` and `compile_seconds` (XLA backend compiles)."""
    with _lock:
        now = dict(_counts)
    # jax times a load from its own cache as a backend compile too
    now["compiles"] = max(0, now["compiles"] - now["jax_hits"])
    return now


def _on_event(event: str, **_: str | int) -> None:
    if event == _JAX_HIT:
        with _lock:
            _counts["jax_hits"] += 1


def _on_duration(event: str, duration_secs: float, **_: str | int) -> None:
    if event == _COMPILE:
        with _lock:
            _counts["compiles"] += 1
            _counts["compile_seconds"] += duration_secs


def recent_runs(directory: str) -> list[dict]:
    """The runs recorded in the cache `directory`, oldest first (unreadable lines skipped)."""
    try:
        with open(os.path.join(directory, RUNS), "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    runs = []
    for line in lines:
        with contextlib.suppress(ValueError):
            run = json.loads(line)
            if isinstance(run, dict):
                runs.append(run)
    return runs


def _record() -> None:
    """Append this run's counts to the cache's record, if it used the cache at all."""
    directory = cache_location.peek()
    now = counts()
    if directory is None or not (now["loaded"] or now["jax_hits"] or now["compiles"]):
        return
    now.update(time=round(_started), seconds=round(time.time() - _started, 2),
               command=" ".join(sys.argv)[:200], pid=os.getpid())
    path = os.path.join(directory, RUNS)
    with contextlib.suppress(OSError):
        with open(path, "a") as f:  # one short append: whole, even beside other processes
            f.write(json.dumps(now) + "\n")
        runs = recent_runs(directory)
        if len(runs) > 2 * _KEEP:  # rewritten now and then, atomically
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in runs[-_KEEP:])
            os.replace(tmp, path)


jax.monitoring.register_event_listener(_on_event)
jax.monitoring.register_event_duration_secs_listener(_on_duration)
atexit.register(_record)
