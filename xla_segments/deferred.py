"""An executable still being read from a store on another thread.

A segment's backward runs only after its training forward and whatever the step does between
them (a detector's head, its losses); reading the backward from a store meanwhile hides the
read (XLA links the stored code, 10-200 ms an executable on a CPU) behind that work. Reading
releases the GIL for most of its time, so the step's own Python goes on beside it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Deferred:
    """Stands for `exe.compiled` until the read finishes: the first use waits for it, puts
    the real executable in its place (later calls go straight to it) and fills in what was
    kept beside it. Should the read fail (a damaged file), `rebuild()` compiles it."""

    __slots__ = ("_exe", "_wait", "_rebuild", "_lock", "_compiled")

    def __init__(self, exe: Any, wait: Callable[[], tuple[Any, dict] | None],
                 rebuild: Callable[[], Any]):
        self._exe, self._wait, self._rebuild = exe, wait, rebuild
        self._lock = threading.Lock()
        self._compiled: Any = None

    def resolve(self) -> Any:
        """The executable, once read (or compiled again): waits for it the first time."""
        with self._lock:
            if self._compiled is None:
                start = time.perf_counter()
                found = self._wait()
                if found is None:
                    self._compiled = self._rebuild()
                else:
                    self._compiled, self._exe.compiler_options = found
                self._exe.seconds += time.perf_counter() - start
                self._exe.compiled = self._compiled
            return self._compiled

    def __call__(self, *args: Any) -> Any:
        # (callers may keep this object rather than `exe.compiled`: once read, no lock)
        compiled = self._compiled
        return (compiled if compiled is not None else self.resolve())(*args)

    def __getattr__(self, name: str) -> Any:  # cost_analysis, as_text, output_shardings, ...
        return getattr(self.resolve(), name)
