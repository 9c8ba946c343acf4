"""`TracedFunction`: what `partial_trace` and `xla_trace` return for a function.

A call flattens its arguments into a guard key, finds the cached entry for that key whose other
guards still hold, and runs it; otherwise it captures the function anew (running its Python
once, so Python side effects such as `print` happen only then), compiles it and caches it. Past
`recompile_limit` captures a warning says what changed.

Wrappers of the same code with the same settings share one cache (`cache.shared_cache`), so
`partial_trace(f)(x)` written inline in a loop compiles once; the key holds what tells two such
functions apart (closure variables, defaults, a bound method's object), so a lambda over another
model gets its own entry. Calls of one cache run one at a time (its lock), so threads calling one
compiled step see the results of some serial order.

A capture that meets a break (an `exclude_from_trace()` block, or a value read under
`graph_breaks=True`) hands the rest of the call to the lazy engine (`handover.py`), and from
then on the function runs its Python on every call with ops recorded lazily, each stretch
between breaks running as a cached compiled segment (`lazy.py`).
"""

from __future__ import annotations

import functools as ft
import logging
import types
from collections.abc import Callable
from typing import Any

import eager as eg
from xla_segments import Segment

from .cache import CacheInfo, shared_cache
from .capture import capture
from .entry import MISS, Entry, refuse_outer_gradients
from .handover import BreakFound, HandedOver, hand_over
from .key import describe_change, flatten_call, function_token
from .lazy import Breaks
from .source import describe_location, short_path

logger = logging.getLogger("partial")
hooks = eg.hooks

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
        self._token = function_token(fn)
        self._cache = shared_cache(fn, (kind, differentiable, capture_as_const, recompile_limit,
                                        cache_size, donate, graph_breaks), self._token)

    @property
    def _breaks(self) -> Breaks | None:
        """How the function runs with graph breaks, once it is known to break (shared)."""
        return self._cache.breaks

    def __repr__(self) -> str:
        return f"<{self._kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if hooks.current() is not None:  # inside another region's capture: become part of it
            return self._fn(*args, **kwargs)
        with self._cache.lock:
            if self._breaks is not None:
                return self._run_with_breaks(args, kwargs)
            return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> Any:
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
        elif cache.family.captures >= self._recompile_limit:
            self._warn_wrappers()
        try:
            program = capture(self._fn, *call.arguments(args, kwargs), call, kind=self._kind,
                              differentiable=self._differentiable,
                              capture_as_const=self._capture_as_const,
                              graph_breaks=self._graph_breaks, on_break=self._hand_over)
        except HandedOver as done:  # it broke; the lazy engine finished the call
            self._breaks.last = done.report
            return done.out
        except BreakFound as found:
            first = f"first found: {found.what} at {describe_location(found.where)}"
            logger.warning(
                "%s: `%s` breaks (%s), after %s, which a capture cannot hand over to the lazy "
                "engine, so this first call runs again from the start with graph breaks: its "
                "Python before the break ran twice in this call (once from now on).",
                self._kind, self._name(), first, found.why)
            self._switch_to_breaks(first)
            return self._run_with_breaks(args, kwargs)
        entry = Entry(call.key, program, call, self._name(), differentiable=self._differentiable,
                      donate=self._donate, deaths=cache.deaths)
        cache.captures += 1
        cache.family.captures += 1
        cache.add(entry)
        try:
            out = entry.run(call)  # compiles: a failure here must not leave the entry cached
        except BaseException:
            cache.remove(entry)
            raise
        if out is MISS:  # the arguments were read just now: only a bug gets here
            raise RuntimeError(f"{self._kind}: a freshly compiled entry refused its own call")
        return out

    def _hand_over(self, cap: Any, what: str, where: Any) -> Any:
        """At the first break of a capture: the lazy hooks that finish the call (the region
        runs with breaks from now on), or why the capture cannot be handed over."""
        first = f"first found: {what} at {describe_location(where)}"
        return hand_over(cap, lambda: self._switch_to_breaks(first))

    def _switch_to_breaks(self, first: str) -> Breaks:
        breaks = self._cache.breaks = Breaks(self._name(), self._kind, self._cache,
                                             self._recompile_limit, self._graph_breaks,
                                             self._differentiable, first)
        logger.info("%s: `%s` breaks (%s): it runs its Python on every call, compiling the "
                    "stretches between breaks", self._kind, self._name(), first)
        return breaks

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
        where = self._where()
        logger.warning(
            "%s: `%s`%s is being captured and compiled for the %d. time (recompile_limit=%d): "
            "%s. Every new argument shape, dtype or plain Python value, and every change of "
            "module structure or training mode, compiles anew; keep them fixed (e.g. pad "
            "batches to a few sizes) or raise recompile_limit.", self._kind, self._name(),
            where, self._cache.captures + 1, self._recompile_limit, why)

    def _warn_wrappers(self) -> None:
        logger.warning(
            "%s: `%s`%s is being captured and compiled for the %d. time (recompile_limit=%d) "
            "by wrappers of the same code over other objects: %s(...) is applied anew to a "
            "function whose closure variables, defaults or bound object differ each time (a "
            "lambda over a new model, say). Create the compiled function once, outside the "
            "loop, and pass what changes as arguments.", self._kind, self._name(),
            self._where(), self._cache.family.captures + 1, self._recompile_limit, self._kind)

    def _where(self) -> str:
        code = getattr(getattr(self._fn, "__func__", self._fn), "__code__", None)
        return f" ({short_path(code.co_filename)}:{code.co_firstlineno})" if code else ""

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
        >>> from partial import exclude_from_trace, partial_trace
        >>> @partial_trace
        ... def f(x):
        ...     y = x * 2
        ...     with exclude_from_trace():
        ...         scale = 1.0 if y.sum().item() > 0 else -1.0
        ...     return y * scale
        >>> f(eg.ones(3)).numpy().tolist()
        [2.0, 2.0, 2.0]
        >>> print(f.explain())  # doctest: +ELLIPSIS
        partial_trace `f` has graph breaks (first found: exclude_from_trace() at ...
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
        with self._cache.lock:
            self._cache.clear()
            self._cache.breaks = None


def _describe_break(why: str, where: Any) -> str:
    if where is None:
        return why
    return f"{why} at {short_path(where[0])}:{where[1]}"
