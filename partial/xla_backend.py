"""`xla_trace` (MegEngine's `megengine.jit.xla_backend`): a whole training step as one XLA
executable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import eager.module as M

from .decorators import Decorator, make
from .function import TracedFunction
from .module import TracedModule


@overload
def xla_trace(fn: M.Module, *, capture_as_const: bool = ..., donate: bool = ...,
              graph_breaks: bool = ..., without_host: bool = ..., symbolic_shape: bool = ...,
              **options: Any) -> TracedModule: ...
@overload
def xla_trace(fn: Callable, *, capture_as_const: bool = ..., donate: bool = ...,
              graph_breaks: bool = ..., without_host: bool = ..., symbolic_shape: bool = ...,
              **options: Any) -> TracedFunction: ...
@overload
def xla_trace(fn: None = None, *, capture_as_const: bool = ..., donate: bool = ...,
              graph_breaks: bool = ..., without_host: bool = ..., symbolic_shape: bool = ...,
              **options: Any) -> Decorator: ...
def xla_trace(fn: Callable | None = None, *, capture_as_const: bool = False,
              donate: bool = True, graph_breaks: bool = False, without_host: bool = False,
              symbolic_shape: bool = False, **options: Any) -> Any:
    """Compile a whole training step (forward, `gm.backward`, `opt.step()`) into one XLA
    executable that updates the model and optimizer in place.

    Use as `@xla_trace` or `@xla_trace(capture_as_const=True, ...)`. The eager engine runs
    under capture: the GradManager's tape and backward, its callbacks (scaling, clipping) and
    the optimizer update are traced into the same program. Every tensor the step updates
    (parameters, optimizer slots and step counters, BatchNorm statistics, `.grad` left set, the
    RNG key, tensor arguments updated in place) is written back after the call; hyper-parameters
    are read from `param_groups` at every call, so schedules do not recompile.

    With `donate=True` (the default) the buffers of the parameters and state the step replaces
    are donated to it, so it does not hold two copies; the call checks its inputs before
    anything is donated, so a call that fails then leaves everything intact, and buffers that
    something else still references are copied rather than donated. With `donate=False` no
    failure can lose state. Caching, guards, errors and `cache_info()` are those of
    `partial_trace`. A step is not differentiable from outside: calling it while a GradManager
    records with one of its inputs attached raises `TraceError`.

    A step with an `exclude_from_trace()` block (or, with `graph_breaks=True`, a value read)
    runs as `partial_trace` regions with breaks do: its Python re-runs on every call and the
    stretches between breaks run as compiled segments, `gm.backward` running eagerly over
    their tape nodes. Nothing is donated then. With `without_host=True` (MegEngine's option) a
    break is an `UnsupportedInRegionError` instead: the step is one executable or nothing.
    `symbolic_shape` is accepted for MegEngine code: either way each new input shape compiles
    its own executable (shapes are always concrete here).

    >>> import eager as eg, eager.module as M, eager.optimizer as optim
    >>> from eager.autodiff import GradManager
    >>> net = M.Linear(3, 1)
    >>> opt = optim.SGD(net.parameters(), lr=0.1)
    >>> @xla_trace
    ... def step(x):
    ...     gm = GradManager().attach(net.parameters())
    ...     with gm:
    ...         loss = (net(x) ** 2).mean()
    ...         gm.backward(loss)
    ...     opt.step().clear_grad()
    ...     return loss
    >>> losses = [step(eg.ones((4, 3))).item() for _ in range(3)]
    >>> losses[2] < losses[0]
    True
    """
    del symbolic_shape  # accepted so MegEngine code runs unchanged; shapes are always concrete
    return make(fn, "xla_trace", False, capture_as_const, options, donate=bool(donate),
                 graph_breaks=bool(graph_breaks), without_host=bool(without_host))


__all__ = ["xla_trace"]
