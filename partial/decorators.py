"""The decorators: `partial_trace` (a region as one compiled forward and backward segment inside
eager training), `xla_trace` (a whole step) and `exclude_from_trace` (a block kept eager)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol, overload

import eager as eg
import eager.module as M
from eager.hooks import describe_location, user_location
from xla_segments import REMAT_VALUES

from .errors import UnsupportedInRegionError
from .function import TracedFunction
from .module import TracedModule
from .settings import Settings

hooks = eg.hooks
_OPTIONS = {"recompile_limit": 8, "cache_size": 64}


class Decorator(Protocol):
    """What `partial_trace(...)` and `xla_trace(...)` given options only return: the decorator
    itself, which makes a Module a `TracedModule` and any other callable a `TracedFunction`."""

    # a Module is a callable too: the first overload that matches is meant, which mypy cannot
    # know (it flags the overlap)
    @overload
    def __call__(self, fn: M.Module, /) -> TracedModule: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, fn: Callable, /) -> TracedFunction: ...


def _make(fn: Callable | None, kind: str, differentiable: bool, capture_as_const: bool,
          options: dict[str, Any], donate: bool = False, graph_breaks: bool = False,
          without_host: bool = False, trace_gmcallback: bool = False,
          remat: bool | str = False) -> Any:
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"{kind}() got unknown option(s) {sorted(unknown)}; "
                        f"options are {sorted(_OPTIONS)}")
    if graph_breaks and without_host:
        raise ValueError(f"{kind}(graph_breaks=True, without_host=True): a region without host "
                         "code cannot break; choose one")
    settings = Settings(kind, differentiable, capture_as_const, donate=donate,
                        graph_breaks=graph_breaks, without_host=without_host,
                        trace_gmcallback=trace_gmcallback, remat=_remat(kind, remat),
                        **{**_OPTIONS, **options})

    def decorate(f: Callable) -> Any:
        if not callable(f):
            raise TypeError(f"{kind} decorates a function, got {type(f).__name__}")
        traced = TracedFunction(f, settings)
        return TracedModule(f, traced) if isinstance(f, M.Module) else traced

    return decorate if fn is None else decorate(fn)


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
    return _make(_one_function("partial_trace", fn, func), "partial_trace", True,
                 capture_as_const, options, graph_breaks=bool(graph_breaks),
                 without_host=bool(without_host), trace_gmcallback=bool(trace_gmcallback),
                 remat=remat)


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
    return _make(fn, "xla_trace", False, capture_as_const, options, donate=bool(donate),
                 graph_breaks=bool(graph_breaks), without_host=bool(without_host))


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


def _remat(kind: str, remat: Any) -> bool | str:
    if not any(remat is v or isinstance(remat, str) and remat == v for v in REMAT_VALUES):
        raise ValueError(f"{kind}(remat={remat!r}): remat is False, True or 'dots'")
    return remat


def _one_function(kind: str, fn: Callable | None, func: Callable | None) -> Callable | None:
    if fn is not None and func is not None:
        raise TypeError(f"{kind}() got the function twice (positionally and as func=)")
    return fn if fn is not None else func


@contextlib.contextmanager
def exclude_from_trace() -> Iterator[None]:
    """Run a block eagerly, with real values, on every call, even inside a traced region.

    Inside a `partial_trace` or `xla_trace` region the region is split at the block: what
    comes before runs as one compiled segment, the block runs eagerly (prints, `.item()`,
    appending to lists and data-dependent Python all work), and what follows continues as
    further segments; tensors flow across, and so do gradients. Outside a region it does
    nothing.

    >>> import eager as eg
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
