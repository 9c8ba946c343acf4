"""The decorators: `partial_trace` (a region as one compiled forward and backward segment inside
eager training), `xla_trace` (a whole step) and `exclude_from_trace`.

A decorated function keeps a cache of compiled entries. A call flattens its arguments into a
guard key, finds the entry captured for that key whose other guards still hold, and runs it;
otherwise it captures the function anew (running its Python once, so Python side effects such as
`print` happen only then), compiles it and caches it. Past `recompile_limit` captures a warning
says what changed.

A capture that meets a break (an `exclude_from_trace()` block, or a value read under
`graph_breaks=True`) is abandoned, and from then on the function runs its Python on every call
with ops recorded lazily, each stretch between breaks running as a cached compiled segment
(`lazy.py`).
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
from .capture import BreakFound, capture
from .errors import UnsupportedInRegionError
from .guards import describe_change, flatten_call
from .lazy import Breaks
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
                 donate: bool = False, graph_breaks: bool = False):
        ft.update_wrapper(self, fn, updated=())  # name and docs; never a Module's state
        self._fn = fn
        self._kind = kind
        self._differentiable = differentiable
        self._capture_as_const = capture_as_const
        self._recompile_limit = recompile_limit
        self._donate = donate
        self._graph_breaks = graph_breaks
        self._cache = Cache(cache_size)
        self._breaks: Breaks | None = None  # set once the function is known to break
        self._start_with_breaks()

    def __repr__(self) -> str:
        return f"<{self._kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if hooks.current() is not None:  # inside another region's capture: become part of it
            return self._fn(*args, **kwargs)
        if self._breaks is not None:
            return self._run_with_breaks(args, kwargs)
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
        try:
            program = capture(self._fn, args, kwargs, call, kind=self._kind,
                              differentiable=self._differentiable,
                              capture_as_const=self._capture_as_const,
                              graph_breaks=self._graph_breaks)
        except BreakFound as found:
            self._switch_to_breaks(f"first found: {found.what} at "
                                   f"{describe_location(found.where)}")
            return self._run_with_breaks(args, kwargs)
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

    def _start_with_breaks(self) -> None:
        """A function whose own code uses `exclude_from_trace` breaks: run it that way from
        the first call, rather than capturing it up to the block first (which would run the
        code before the block twice in that call)."""
        if _uses_exclude(self._fn):
            self._switch_to_breaks("exclude_from_trace() in its code")

    def _switch_to_breaks(self, first: str) -> None:
        self._breaks = Breaks(self._name(), self._kind, self._cache, self._recompile_limit,
                              self._graph_breaks, self._differentiable, first)
        logger.info("%s: `%s` breaks (%s): it runs its Python on every call, compiling the "
                    "stretches between breaks", self._kind, self._name(), first)

    def _run_with_breaks(self, args: tuple, kwargs: dict) -> Any:
        if not self._differentiable and hooks.is_recording():
            refuse_outer_gradients(flatten_call(args, kwargs).tensors)
        return self._breaks.run(self._fn, args, kwargs)

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
        return [e.segment for e in self._cache.lru] + [
            p.segment for p in self._cache.pieces.values()]

    def flat_inputs(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The arrays a call with these arguments passes to its compiled segment, in order:
        the Tensor arguments, then every tensor, `.grad` and hyper-parameter the region reads.
        Raises LookupError when no cached entry serves these arguments yet."""
        if self._breaks is not None:
            raise LookupError(f"{self._kind} `{self._name()}` has graph breaks: each call "
                              "runs several segments, whose inputs depend on the call")
        call = flatten_call(args, kwargs)
        entry = self._cache.lookup(call)
        inputs = None if entry is None else entry.inputs(call)
        if inputs is None:
            raise LookupError(f"{self._kind} `{self._name()}` has no compiled entry for these "
                              "arguments; call it with them first")
        return inputs[0]

    def cache_info(self) -> CacheInfo:
        """Captures, hits, entries held and compile seconds of this function's cache, and the
        segments and breaks of the last call."""
        if self._breaks is None:
            return self._cache.info(int(self._cache.captures > 0))
        last = self._breaks.last
        return self._cache.info(sum(1 for n, *_ in last if n),
                                tuple(_describe_break(why, where) for _, why, where, _ in last
                                      if where is not None or why != "end of the region"),
                                sum(n for n, *_ in last))

    def explain(self) -> str:
        """How the last call ran, in words: one compiled region, or the segments it ran and
        why each break happened (file and line).

        >>> import eager as eg
        >>> @partial_trace
        ... def f(x):
        ...     y = x * 2
        ...     with exclude_from_trace():
        ...         scale = 1.0 if y.sum().item() > 0 else -1.0
        ...     return y * scale
        >>> f(eg.ones(3)).numpy().tolist()
        [2.0, 2.0, 2.0]
        >>> print(f.explain())  # doctest: +ELLIPSIS
        partial_trace `f` has graph breaks (exclude_from_trace() in its code): it re-runs ...
        the last call ran 2 segments:
          1. 1 op (compiled), then exclude_from_trace() at ...
          2. 1 op (compiled), then the end of the region
        cache: 2 captures, 0 hits, 2 entries, ... s compiling
        """
        info = self._cache.info()
        head = f"{self._kind} `{self._name()}`"
        lines = []
        if self._breaks is None:
            lines.append(f"{head} has not been called yet" if not self._cache.captures else
                         f"{head} runs one compiled segment per call, without graph breaks; "
                         "its Python runs only when it is captured")
        else:
            last = self._breaks.last
            lines.append(f"{head} has graph breaks ({self._breaks.first_break}): it re-runs "
                         "its Python on every call")
            ran = sum(1 for n, *_ in last if n)
            lines.append(f"the last call ran {ran} segment{'s' * (ran != 1)}:")
            k = 0
            for n, why, where, how in last:
                then = "the " + why if where is None else _describe_break(why, where)
                if n:
                    k += 1
                    lines.append(f"  {k}. {n} op{'s' * (n != 1)} ({how}), then {then}")
                else:
                    lines.append(f"     no ops, then {then}")
        lines.append(f"cache: {info.captures} captures, {info.hits} hits, {info.entries} "
                     f"entries, {info.compile_seconds:.2f} s compiling")
        return "\n".join(lines)

    def cache_clear(self) -> None:
        """Drop every compiled entry (e.g. after rebinding a global the region reads); a
        region that had graph breaks is captured whole again on its next call."""
        self._cache.clear()
        self._breaks = None
        self._start_with_breaks()


def _uses_exclude(fn: Any) -> bool:
    """Whether the code of `fn` (a function, method, Module or callable object), including
    functions defined inside it, names `exclude_from_trace`."""
    target = getattr(fn, "__func__", fn)
    code = getattr(target, "__code__", None)
    if code is None:
        method = getattr(type(fn), "forward", None) or type(fn).__call__
        code = getattr(method, "__code__", None)
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        if "exclude_from_trace" in code.co_names or "exclude_from_trace" in code.co_freevars:
            return True
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return False


def _describe_break(why: str, where: Any) -> str:
    if where is None:
        return why
    return f"{why} at {short_path(where[0])}:{where[1]}"


def _make(fn: Callable | None, kind: str, differentiable: bool, capture_as_const: bool,
          options: dict[str, Any], donate: bool = False, graph_breaks: bool = False) -> Any:
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"{kind}() got unknown option(s) {sorted(unknown)}; "
                        f"options are {sorted(_OPTIONS)}")
    settings = {**_OPTIONS, **options}

    def decorate(f: Callable) -> TracedFunction:
        if not callable(f):
            raise TypeError(f"{kind} decorates a function, got {type(f).__name__}")
        return TracedFunction(f, kind=kind, differentiable=differentiable,
                              capture_as_const=capture_as_const, donate=donate,
                              graph_breaks=graph_breaks, **settings)

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

    Graph breaks. A `with exclude_from_trace():` block inside the region runs eagerly on every
    call, with real values; with `graph_breaks=True` a value read (`.item()`, `.numpy()`,
    `bool()`, `if t > 0:`) is a break point too instead of an error. A region that breaks
    re-runs its Python on every call: ops are recorded without computing, and each stretch between
    breaks runs as a compiled segment (one tape node under a recording GradManager), compiled
    once per distinct op sequence. A function whose own code uses `exclude_from_trace` runs
    this way from its first call; one that breaks deeper (in a module it calls, or at a value
    read) from the call whose capture meets the break, in which the code before the break runs
    twice. `explain()` and `cache_info()` report the segments and where the breaks were.

    Args:
        fn: the function (any nesting of Tensors, Modules, Optimizers and plain values in and
            out).
        backend: "xla" (the only backend).
        capture_as_const: bake closed-over tensors that are not reachable from Module or
            Optimizer arguments, and that the region does not rebind, into the program as
            constants instead of reading them at every call.
        graph_breaks: split the region at value reads instead of raising `ValueReadError`.
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
    return _make(fn, "partial_trace", True, capture_as_const, options,
                 graph_breaks=bool(graph_breaks))


def xla_trace(fn: Callable | None = None, *, capture_as_const: bool = False,
              donate: bool = True, graph_breaks: bool = False, **options: Any) -> Any:
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
    their tape nodes. Nothing is donated then.

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
    return _make(fn, "xla_trace", False, capture_as_const, options, donate=bool(donate),
                 graph_breaks=bool(graph_breaks))


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
