"""The runner of a function without graph breaks: one compiled entry per guard key.

A call flattens its arguments into a guard key, finds the cached entry for that key whose other
guards still hold, and runs it; otherwise it captures the function anew (running its Python
once, so Python side effects such as `print` happen only then), compiles it and caches it. Past
`recompile_limit` captures a warning says what changed. A capture that meets a break hands the
call over to the lazy engine through `lazy`, given at construction (`LazyStart`: the lazy
engine's `Handover`), which makes its `Breaks` the function's runner from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import eager as eg
from eager.hooks import describe_location, short_path

from ..capture import BreakFound, HandedOver, capture
from ..messages import warn_recompile
from ..region import Cache, CacheInfo, Call, describe_change, flatten_call
from ..settings import Settings
from .entry import MISS, Entry, refuse_outer_gradients

logger = logging.getLogger("partial")
hooks = eg.hooks


class LazyStart(Protocol):
    """What a region that breaks is handed to (the lazy engine's `Handover`)."""

    def __call__(self, cap: Any, what: str, where: Any) -> Any:
        """At a capture's first break: the lazy hooks that finish the call, or why none can."""

    def start(self, first: str) -> Any:
        """Make the region run with breaks from now on; return its new runner."""


class WholeRegion:
    """Runs calls of the function(s) sharing `cache` as whole compiled regions."""

    def __init__(self, name: str, settings: Settings, cache: Cache[Entry], lazy: LazyStart,
                 finisher: Callable | None = None):
        self.name, self.settings, self.cache = name, settings, cache
        self.lazy = lazy  # how the region comes to run with breaks, if it breaks
        self.finisher = finisher  # runs GradManager callbacks compiled (trace_gmcallback)

    def call(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        call = flatten_call(args, kwargs)
        cache = self.cache
        entry = cache.lookup(call)
        if entry is None:
            return self._capture(fn, call, args, kwargs, cache.reasons)
        out = entry.run(call)
        if out is MISS:
            cache.remove(entry)
            return self._capture(fn, call, args, kwargs, [
                "a tensor the region reads changed shape or dtype, or no longer exists"])
        cache.hits += 1
        return out

    def _capture(self, fn: Callable, call: Call, args: tuple, kwargs: dict,
                 reasons: list[str]) -> Any:
        cache, s = self.cache, self.settings
        if not s.differentiable and hooks.is_recording():
            refuse_outer_gradients(call.tensors)
        why = self._why(fn, call, args, kwargs, reasons)
        cache.history.append(why)
        logger.info("%s `%s`: capture %d: %s", s.kind, self.name, cache.captures + 1, why)
        if cache.captures >= s.recompile_limit:
            self._warn_recompile(fn, why)
        elif cache.family.captures >= s.recompile_limit:
            self._warn_wrappers(fn)
        try:
            program = capture(fn, *call.arguments(args, kwargs), call, kind=s.kind,
                              differentiable=s.differentiable,
                              capture_as_const=s.capture_as_const,
                              graph_breaks=s.graph_breaks, on_break=self.lazy)
        except HandedOver as done:  # it broke; the lazy engine finished the call
            cache.runner.last = done.report
            return done.out
        except BreakFound as found:
            first = f"first found: {found.what} at {describe_location(found.where)}"
            logger.warning(
                "%s: `%s` breaks (%s), after %s, which a capture cannot hand over to the lazy "
                "engine, so this first call runs again from the start with graph breaks: its "
                "Python before the break ran twice in this call (once from now on).",
                s.kind, self.name, first, found.why)
            program = None
        if program is None:
            # Outside the handler, so that an error of this call is not shown as raised while
            # handling BreakFound, and the failed capture's frames are not kept while it runs.
            return self.lazy.start(first).call(fn, args, kwargs)
        entry = Entry(call.key, program, call, self.name, differentiable=s.differentiable,
                      donate=s.donate, deaths=cache.deaths, finisher=self.finisher,
                      remat=s.remat)
        cache.captures += 1
        cache.family.captures += 1
        cache.add(entry)
        try:
            out = entry.run(call)  # compiles: a failure here must not leave the entry cached
        except BaseException:
            cache.remove(entry)
            raise
        if out is MISS:  # the arguments were read just now: only a bug gets here
            raise RuntimeError(f"{s.kind}: a freshly compiled entry refused its own call")
        return out

    def _why(self, fn: Callable, call: Call, args: tuple, kwargs: dict,
             reasons: list[str]) -> str:
        """Why a capture happens now, in words: what differs from the cached entries."""
        if not self.cache.captures:
            return "the first call"
        if reasons:
            return "; ".join(dict.fromkeys(reasons))
        closest = _closest([e.key for e in self.cache.entries()], call.key)
        return describe_change(fn, closest, call.key, args, kwargs) if closest else \
            "no compiled entry was cached (cache_clear() or cache_size)"

    def _warn_recompile(self, fn: Callable, why: str) -> None:
        warn_recompile(
            self.settings.kind, f"`{self.name}`{_where(fn)}", self.cache.captures + 1,
            self.settings.recompile_limit, why, "Every new argument shape, dtype or plain "
            "Python value, and every change of module structure or training mode, compiles "
            "anew; keep them fixed (e.g. pad batches to a few sizes) or raise recompile_limit.")

    def _warn_wrappers(self, fn: Callable) -> None:
        kind = self.settings.kind
        warn_recompile(
            kind, f"`{self.name}`{_where(fn)}", self.cache.family.captures + 1,
            self.settings.recompile_limit, f"by wrappers of the same code over other objects: "
            f"{kind}(...) is applied anew to a function whose closure variables, defaults or "
            "bound object differ each time (a lambda over a new model, say)", "Create the "
            "compiled function once, outside the loop, and pass what changes as arguments.")

    def info(self) -> CacheInfo:
        return self.cache.info(int(self.cache.captures > 0))

    def describe(self, head: str) -> list[str]:
        """How calls run, in lines, for `explain()`."""
        if not self.cache.captures:
            return [f"{head} has not been called yet"]
        return [f"{head} runs one compiled segment per call, without graph breaks; its Python "
                "runs only when it is captured"]

    def flat_inputs(self, args: tuple, kwargs: dict) -> list:
        call = flatten_call(args, kwargs)
        entry = self.cache.lookup(call)
        inputs = None if entry is None else entry.inputs(call)
        if inputs is None:
            raise LookupError(f"{self.settings.kind} `{self.name}` has no compiled entry for "
                              "these arguments; call it with them first")
        return inputs[0]


def _closest(keys: list[tuple], key: tuple) -> tuple | None:
    """Of the cached guard keys (least recently used first), the one `key` differs from least
    (the same argument structure first, then the fewest argument leaves changed, then the most
    recently used): what a new capture is best explained by."""
    def distance(other: tuple) -> tuple:
        if other[0] != key[0]:
            return (1, 0)
        return (0, sum(a != b for a, b in zip(other[1], key[1])) + (other[2:] != key[2:]))

    return min(reversed(keys), key=distance, default=None)


def _where(fn: Callable) -> str:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return f" ({short_path(code.co_filename)}:{code.co_firstlineno})" if code else ""
