"""MegEngine's `megengine.jit.tracing`: its classic `trace` (here `xla_trace` under MegEngine's
options) and `exclude_from_trace`, a block kept eager inside a compiled region."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, overload

import eager as eg
import eager.module as M
from eager.hooks import describe_location, user_location

from .decorators import Decorator
from .errors import TraceError, UnsupportedInRegionError
from .function import TracedFunction
from .module import TracedModule
from .xla_backend import xla_trace

hooks = eg.hooks


@overload
def trace(function: M.Module, *, symbolic: bool = ..., capture_as_const: bool = ...,
          without_host: bool = ..., symbolic_shape: bool = ...,
          **options: Any) -> TracedModule: ...
@overload
def trace(function: Callable, *, symbolic: bool = ..., capture_as_const: bool = ...,
          without_host: bool = ..., symbolic_shape: bool = ...,
          **options: Any) -> TracedFunction: ...
@overload
def trace(function: None = None, *, symbolic: bool = ..., capture_as_const: bool = ...,
          without_host: bool = ..., symbolic_shape: bool = ..., **options: Any) -> Decorator: ...
def trace(function: Callable | None = None, *, symbolic: bool = True,
          capture_as_const: bool = False, without_host: bool = False,
          symbolic_shape: bool = True, **options: Any) -> Any:
    """MegEngine's classic `trace` (`megengine.jit.trace`), as `xla_trace`: the decorated
    step (forward, `gm.backward`, `opt.step()`) compiles into one executable.

    `symbolic` and `symbolic_shape` are accepted for MegEngine code: both values of `symbolic`
    compile the whole function (this project has no imperative tracing mode), and each new
    input shape compiles its own executable. Options are `xla_trace`'s.

    >>> import eager as eg
    >>> @trace(symbolic=True)
    ... def double(x):
    ...     return x * 2
    >>> double(eg.ones(2)).numpy().tolist()
    [2.0, 2.0]
    """
    del symbolic, symbolic_shape  # both modes compile; accepted so MegEngine code runs unchanged
    return xla_trace(function, capture_as_const=capture_as_const, without_host=without_host,
                     **options)


@contextlib.contextmanager
def exclude_from_trace() -> Iterator[None]:
    """Run a block eagerly, with real values, on every call, even inside a traced region.

    Inside a `partial_trace` or `xla_trace` region the region is split at the block: what
    comes before runs as one compiled segment, the block runs eagerly (prints, `.item()`,
    appending to lists and data-dependent Python all work), and what follows continues as
    further segments; tensors flow across, and so do gradients. Outside a region it does
    nothing.

    >>> import eager as eg
    >>> from partial import partial_trace
    >>> seen = []
    >>> @partial_trace
    ... def f(x):
    ...     y = x + 1
    ...     with exclude_from_trace():
    ...         seen.append(y.sum().item())
    ...     return y * 2
    >>> [f(eg.ones(2)).numpy().tolist() for _ in range(2)]
    [[4.0, 4.0], [4.0, 4.0]]
    >>> seen
    [4.0, 4.0]
    """
    h = hooks.current()
    if h is None:
        yield
        return
    stop = getattr(h, "break_here", None)
    if stop is None:
        raise UnsupportedInRegionError(
            f"{describe_location(user_location())}: exclude_from_trace() inside a capture "
            "that cannot break; move the block out of it")
    stop("exclude_from_trace()", user_location())
    with hooks.capturing(None):
        yield


# TraceError too: MegEngine code imports it from here (`from megengine.jit.tracing import ...`)
__all__ = ["trace", "exclude_from_trace", "TraceError"]
