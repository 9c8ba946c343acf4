"""What a decorator chose for a traced function, as one value shared by its runners."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """How a traced function captures, compiles and runs. Wrappers of the same code with
    equal settings share one cache (`cache.shared_cache`)."""

    kind: str  # "partial_trace" or "xla_trace", for messages
    differentiable: bool  # a partial_trace region: its backward is compiled too
    capture_as_const: bool = False
    recompile_limit: int = 8
    cache_size: int = 64
    donate: bool = False
    graph_breaks: bool = False
    without_host: bool = False  # a graph break is an error: no Python runs per call
    trace_gmcallback: bool = False  # GradManager callbacks of segment inputs run compiled
    remat: bool | str = False  # the training forward keeps (True) only inputs / ("dots") matmuls
