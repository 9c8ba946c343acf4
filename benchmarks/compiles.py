"""Counting XLA compilations through jax's own compile events (`jax.monitoring`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import jax

_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILE = "/jax/core/compile/backend_compile_duration"
# an eager op's executable loaded from the cache that `eager` keeps beside jax's (counted as a
# compile, as jax counts a load from its own cache)
_EAGER_LOAD = "/eager/persistent_cache/load_duration"


@dataclass
class Compiles:
    """Compile events seen while `count_compiles()` is active."""

    count: int = 0  # backend compiles (one per executable XLA builds) and eager cache loads
    seconds: float = 0.0  # tracing + lowering + backend compile
    names: dict[str, int] = field(default_factory=dict)  # compiles per jitted function
    backend: dict[str, float] = field(default_factory=dict)  # backend seconds per function

    def on_duration(self, event: str, secs: float, **kwargs: object) -> None:
        if event in (_COMPILE, _EAGER_LOAD):
            self.count += 1
            name = str(kwargs.get("fun_name", "?"))
            self.names[name] = self.names.get(name, 0) + 1
            self.backend[name] = self.backend.get(name, 0.0) + secs
        if event in (_TRACE, _LOWER, _COMPILE, _EAGER_LOAD):
            self.seconds += secs


@contextlib.contextmanager
def count_compiles() -> Iterator[Compiles]:
    """Count the XLA compiles (and their seconds) of the block, through jax.monitoring."""
    seen = Compiles()
    jax.monitoring.register_event_duration_secs_listener(seen.on_duration)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(seen.on_duration)
