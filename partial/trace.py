"""The decorators: `partial_trace` (a region as one compiled forward and backward segment inside
eager training) and `exclude_from_trace`.

A decorated function keeps a cache of compiled entries. A call flattens its arguments into a
guard key, finds the entry captured for that key whose other guards still hold, and runs it;
otherwise it captures the function anew (running its Python once, so Python side effects such as
`print` happen only then), compiles it and caches it. Past `recompile_limit` captures a warning
says what changed.
"""

from __future__ import annotations

import contextlib
import functools as ft
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import eager as eg
from xla_segments import Segment

from .cache import Cache, CacheInfo
from .capture import capture
from .errors import UnsupportedInRegionError
from .guards import describe_change, flatten_call
from .program import MISS, Entry, refuse_outer_gradients
from .source import describe_location, short_path, user_location

logger = logging.getLogger("partial")
hooks = eg.hooks

_OPTIONS = {"recompile_limit": 8, "cache_size": 64}


class TracedFunction:
    """A function compiled by region: see `partial_trace`. Exposes `cache_info()` and
    `cache_clear()`, and binds like a function when used as a method."""

    def __init__(self, fn: Callable, *, kind: str, differentiable: bool,
                 capture_as_const: bool, recompile_limit: int, cache_size: int,
                 donate: bool = False):
        ft.update_wrapper(self, fn, updated=())  # name and docs; never a Module's state
        self._fn = fn
        self._kind = kind
        self._differentiable = differentiable
        self._capture_as_const = capture_as_const
        self._recompile_limit = recompile_limit
        self._donate = donate
        self._cache = Cache(cache_size)

    def __repr__(self) -> str:
        return f"<{self._kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if hooks.active is not None:  # inside another region's capture: become part of it
            return self._fn(*args, **kwargs)
        call = flatten_call(args, kwargs)
        cache = self._cache
        entry = cache.lookup(call)
        if entry is None:
            return self._capture(call, args, kwargs, cache.reasons)
        out = entry.run(call)
        if out is MISS:
            cache.remove(entry)
            return self._capture(call, args, kwargs, [
                "a tensor the region reads changed shape or dtype, or no longer exists"])
        cache.hits += 1
        return out

    def _capture(self, call: Any, args: tuple, kwargs: dict, reasons: list[str]) -> Any:
        cache = self._cache
        if not self._differentiable and hooks.is_recording():
            refuse_outer_gradients(call.tensors)
        if cache.captures >= self._recompile_limit:
            self._warn_recompile(call, args, kwargs, reasons)
        program = capture(self._fn, args, kwargs, call, kind=self._kind,
                          differentiable=self._differentiable,
                          capture_as_const=self._capture_as_const)
        entry = Entry(call.key, program, call, self._name(),
                      differentiable=self._differentiable, donate=self._donate)
        cache.captures += 1
        cache.add(entry)
        try:
            out = entry.run(call)  # compiles: a failure here must not leave the entry cached
        except BaseException:
            cache.remove(entry)
            raise
        if out is MISS:  # the arguments were read just now: only a bug gets here
            raise RuntimeError(f"{self._kind}: a freshly compiled entry refused its own call")
        return out

    def _name(self) -> str:
        return getattr(self._fn, "__name__", type(self._fn).__name__).strip("<>") or "region"

    def _warn_recompile(self, call: Any, args: tuple, kwargs: dict, reasons: list[str]) -> None:
        if reasons:
            why = "; ".join(dict.fromkeys(reasons))
        else:
            last = self._cache.most_recent()
            why = describe_change(self._fn, last.key, call.key, args, kwargs) if last else \
                "no compiled entry was cached (cache_clear() or cache_size)"
        code = getattr(self._fn, "__code__", None)
        where = f" ({short_path(code.co_filename)}:{code.co_firstlineno})" if code else ""
        logger.warning(
            "%s: `%s`%s is being captured and compiled for the %d. time (recompile_limit=%d): "
            "%s. Every new argument shape, dtype or plain Python value, and every change of "
            "module structure or training mode, compiles anew; keep them fixed (e.g. pad "
            "batches to a few sizes) or raise recompile_limit.", self._kind, self._name(),
            where, self._cache.captures + 1, self._recompile_limit, why)

    def segments(self) -> list[Segment]:
        """The compiled segments of the cached entries, least recently used first (each can
        report its executables' cost, memory and HLO)."""
        return [e.segment for e in self._cache.lru]

    def flat_inputs(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The arrays a call with these arguments passes to its compiled segment, in order:
        the Tensor arguments, then every tensor, `.grad` and hyper-parameter the region reads.
        Raises LookupError when no cached entry serves these arguments yet."""
        call = flatten_call(args, kwargs)
        entry = self._cache.lookup(call)
        inputs = None if entry is None else entry.inputs(call)
        if inputs is None:
            raise LookupError(f"{self._kind} `{self._name()}` has no compiled entry for these "
                              "arguments; call it with them first")
        return inputs[0]

    def cache_info(self) -> CacheInfo:
        """Captures, hits, entries held and compile seconds of this function's cache."""
        return self._cache.info()

    def cache_clear(self) -> None:
        """Drop every compiled entry (e.g. after rebinding a global the region reads)."""
        self._cache.clear()


def _make(fn: Callable | None, kind: str, differentiable: bool, capture_as_const: bool,
          options: dict[str, Any], donate: bool = False) -> Any:
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"{kind}() got unknown option(s) {sorted(unknown)}; "
                        f"options are {sorted(_OPTIONS)}")
    settings = {**_OPTIONS, **options}

    def decorate(f: Callable) -> TracedFunction:
        if not callable(f):
            raise TypeError(f"{kind} decorates a function, got {type(f).__name__}")
        return TracedFunction(f, kind=kind, differentiable=differentiable,
                              capture_as_const=capture_as_const, donate=donate, **settings)

    return decorate if fn is None else decorate(fn)


def partial_trace(fn: Callable | None = None, *, backend: str = "xla",
                  capture_as_const: bool = False, graph_breaks: bool = False,
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

    Args:
        fn: the function (any nesting of Tensors, Modules, Optimizers and plain values in and
            out).
        backend: "xla" (the only backend).
        capture_as_const: bake closed-over tensors that are not reachable from Module or
            Optimizer arguments, and that the region does not rebind, into the program as
            constants instead of reading them at every call.
        graph_breaks: reserved for splitting a region at value reads (not available yet).
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
    if backend != "xla":
        raise ValueError(f"partial_trace: unknown backend {backend!r}; the backend is 'xla'")
    if graph_breaks:
        raise NotImplementedError("partial_trace(graph_breaks=True) is not available yet; "
                                  "split the region where it reads a value instead")
    return _make(fn, "partial_trace", True, capture_as_const, options)


def xla_trace(fn: Callable | None = None, *, capture_as_const: bool = False,
              donate: bool = True, **options: Any) -> Any:
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
    return _make(fn, "xla_trace", False, capture_as_const, options, donate=bool(donate))


@contextlib.contextmanager
def exclude_from_trace() -> Iterator[None]:
    """Run a block eagerly. Outside a region it does nothing special; inside a traced region
    running code eagerly on every call is not available yet and raises `TraceError`."""
    if hooks.active is not None:
        raise UnsupportedInRegionError(
            f"{describe_location(user_location())}: exclude_from_trace() inside a traced region "
            "is not supported yet. Move the block out of the region, splitting the function "
            "into two traced functions around it.")
    yield
