"""`partial_trace` (MegEngine's `megengine.jit.partial_tracing`): a region as one compiled
forward and backward segment inside eager training."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import eager.module as M

from .decorators import Decorator, make, one_function
from .function import TracedFunction
from .module import TracedModule


# The overloads give the type of what each form returns: `@partial_trace` on a Module, on a
# function, with options only (a decorator), or with MegEngine's `func=`.
@overload
def partial_trace(fn: M.Module, *, backend: str = ..., capture_as_const: bool = ...,
                  graph_breaks: bool = ..., without_host: bool = ...,
                  trace_gmcallback: bool = ..., remat: bool | str = ...,
                  **options: Any) -> TracedModule: ...
@overload
def partial_trace(fn: Callable, *, backend: str = ..., capture_as_const: bool = ...,
                  graph_breaks: bool = ..., without_host: bool = ...,
                  trace_gmcallback: bool = ..., remat: bool | str = ...,
                  **options: Any) -> TracedFunction: ...
@overload
def partial_trace(fn: None = None, *, func: None = None, backend: str = ...,
                  capture_as_const: bool = ..., graph_breaks: bool = ...,
                  without_host: bool = ..., trace_gmcallback: bool = ...,
                  remat: bool | str = ..., **options: Any) -> Decorator: ...
@overload
def partial_trace(fn: None = None, *, func: Callable, backend: str = ...,
                  capture_as_const: bool = ..., graph_breaks: bool = ...,
                  without_host: bool = ..., trace_gmcallback: bool = ...,
                  remat: bool | str = ..., **options: Any) -> TracedFunction | TracedModule: ...
def partial_trace(fn: Callable | None = None, *, func: Callable | None = None,
                  backend: str = "xla", capture_as_const: bool = False,
                  graph_breaks: bool = False, without_host: bool = False,
                  trace_gmcallback: bool = False, remat: bool | str = False,
                  **options: Any) -> Any:
    """Compile a region of eager code into one XLA forward (and backward) segment.

    Use as `@partial_trace` or `@partial_trace(capture_as_const=True, ...)`. The region's
    Tensor arguments, and every tensor it reads from closures, globals, modules and optimizers,
    are inputs of the compiled code (read afresh at each call, so gradients reach them and
    updates are seen); in-place updates (BatchNorm statistics, `x[...] = v`, an optimizer step)
    and the RNG state are written back after each call. Under a recording GradManager the call
    becomes one node of the eager tape whose backward runs one compiled backward executable.

    The Python body runs only when the function is captured (the first call for each guard
    key), like `jax.jit`: Python side effects happen then, and reading a tensor's value inside
    raises `TraceError`.

    Graph breaks. A `with exclude_from_trace():` block inside the region runs eagerly on every
    call, with real values; with `graph_breaks=True` a value read (`.item()`, `.numpy()`,
    `bool()`, `if t > 0:`) is a break point too instead of an error. A region that breaks
    re-runs its Python on every call: ops are recorded without computing, and each stretch between
    breaks runs as a compiled segment (one tape node under a recording GradManager), compiled
    once per distinct op sequence. The first call that meets a break, wherever it is (in a
    module the region calls too), is captured up to it and finished lazily, so the code
    before the break runs once. `explain()` and `cache_info()` report the segments and where
    the breaks were.

    Args:
        fn: the function (any nesting of Tensors, Modules, Optimizers and plain values in and
            out).
        backend: "xla" (the only backend).
        capture_as_const: bake closed-over tensors that are not reachable from Module or
            Optimizer arguments, and that the region does not rebind, into the program as
            constants instead of reading them at every call.
        graph_breaks: split the region at value reads instead of raising `ValueReadError`.
        without_host: promise that no Python runs on a call once the region is compiled (as
            MegEngine's option): a graph break is then an `UnsupportedInRegionError` instead
            of a split. `func=` is MegEngine's spelling of `fn`.
        trace_gmcallback: run the callbacks attached to the GradManager (`gm.attach(params,
            callbacks=...)`) compiled, for every input whose gradient comes from the segment
            alone: one compiled step right after the segment's backward executable applies
            them all, and they do not run in Python. As in MegEngine, their Python side effects
            then happen only when that step is captured; tensors they close over are read at
            every call. Off by default (MegEngine's default is on), so that callbacks that log
            or read values keep working; a region with graph breaks runs them in Python.
        remat: rematerialization (`jax.checkpoint`) of the segment's training forward: False
            keeps what jax's vjp keeps for the backward; True keeps only the inputs and
            recomputes the forward in the backward; "dots" also keeps the results of matmuls
            and convolutions. Values and gradients are the same; memory held between forward
            and backward goes down (`residual_bytes` in `entries()`), time goes up.
        recompile_limit: captures after which a warning explains each new capture (default 8).
        cache_size: compiled entries kept, least recently used dropped first (default 64).

    >>> import eager as eg, eager.module as M
    >>> net = M.Linear(4, 2)
    >>> @partial_trace
    ... def backbone(x):
    ...     return net(x) * 2
    >>> backbone(eg.ones((3, 4))).shape
    (3, 2)
    >>> backbone.cache_info().captures
    1
    """
    if backend not in ("xla", "default"):
        raise ValueError(f"partial_trace: unknown backend {backend!r}; the backend is 'xla'")
    return make(one_function("partial_trace", fn, func), "partial_trace", True,
                 capture_as_const, options, graph_breaks=bool(graph_breaks),
                 without_host=bool(without_host), trace_gmcallback=bool(trace_gmcallback),
                 remat=remat)


__all__ = ["partial_trace"]
