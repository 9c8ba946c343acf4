"""`TracedFunction`: what `partial_trace` and `xla_trace` return for a function.

Calls go to the runner of the function's cache, one per mode: `compiled.WholeRegion` (one
compiled entry per guard key) until the region is found to break, then `lazy.Breaks` (the
region's Python on every call, stretches between breaks compiled), which the lazy engine's
`Handover`, given to the whole runner here, starts. `cache_clear()` starts over whole.

Wrappers of the same code with the same settings share one cache (`region.shared_cache`), so
`partial_trace(f)(x)` written inline in a loop compiles once; the key holds what tells two such
functions apart (closure variables, defaults, a bound method's object), so a lambda over another
model gets its own entry. Calls of one cache run one at a time (its lock), so threads calling one
compiled step see the results of some serial order.
"""

from __future__ import annotations

import functools as ft
import os
import types
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import jax

import eager as eg
from xla_segments import Segment

from .compiled import CompiledCallbacks, EntryInfo, WholeRegion, entry_info
from .export import dump_region, export_region
from .lazy import Handover
from .region import CacheInfo, function_token, shared_cache
from .settings import Settings

hooks = eg.hooks
# How `trace_gmcallback` compiles the callbacks: as a step, without donation (the gradients
# and parameters it reads stay the caller's).
_STEP = Settings("xla_trace", differentiable=False)


class TracedFunction:
    """A function compiled by region: see `partial_trace`. Exposes `cache_info()` and
    `cache_clear()`, and binds like a function when used as a method."""

    def __init__(self, fn: Callable, settings: Settings):
        ft.update_wrapper(self, fn, updated=())  # name and docs; never a Module's state
        self._fn = fn
        self._settings = settings
        self._cache = shared_cache(fn, settings, function_token(fn))
        if self._cache.runner is None:
            self._cache.runner = self._whole()

    def _whole(self) -> WholeRegion:
        finisher = None
        if self._settings.trace_gmcallback:
            finisher = CompiledCallbacks(self._name(), lambda f: TracedFunction(f, _STEP))
        name = self._name()
        return WholeRegion(name, self._settings, self._cache,
                           Handover(name, self._settings, self._cache), finisher)

    def __repr__(self) -> str:
        return f"<{self._settings.kind} {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if hooks.current() is not None:  # inside another region's capture: become part of it
            return self._fn(*args, **kwargs)
        with self._cache.lock:
            return self._cache.runner.call(self._fn, args, kwargs)

    def _name(self) -> str:
        return getattr(self._fn, "__name__", type(self._fn).__name__).strip("<>") or "region"

    def entries(self) -> list[EntryInfo]:
        """The compiled entries of a region without graph breaks, least recently used first:
        for each, the arguments it was compiled for, its guards, HLO, XLA's cost and memory
        analyses, the bytes kept from forward to backward and its compile time (see
        `EntryInfo`). A region with breaks caches pieces instead: see `explain()`."""
        with self._cache.lock:
            return [entry_info(e, self._fn) for e in self._cache.entries()]

    def segments(self) -> list[Segment]:
        """The compiled segments of the cached entries and pieces, least recently used first
        (each can report its executables' cost, memory and HLO)."""
        return [e.segment for e in self._cache.lru]

    def flat_inputs(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The arrays a call with these arguments passes to its compiled segment, in order:
        the Tensor arguments, then every tensor, `.grad` and hyper-parameter the region reads.
        Raises LookupError when no cached entry serves these arguments yet, or the region has
        graph breaks."""
        return self._cache.runner.flat_inputs(args, kwargs)

    def cache_info(self) -> CacheInfo:
        """Captures, hits, entries held and compile seconds of this function's cache, and the
        segments and breaks of the last call."""
        return self._cache.runner.info()

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
        lines = self._cache.runner.describe(f"{self._settings.kind} `{self._name()}`")
        history = list(self._cache.history)
        if len(history) > 1:
            first = max(info.captures - len(history), 0) + 1
            lines.append("captured again because:")
            lines += [f"  capture {first + i}: {why}" for i, why in enumerate(history)
                      if first + i > 1]
        lines.append(f"cache: {info.captures} captures, {info.hits} hits, {info.entries} "
                     f"entries, {info.compile_seconds:.2f} s compiling")
        return "\n".join(lines)

    def dump(self, path: str | os.PathLike | BinaryIO, *, dynamic_batch: bool = False,
             keep_params: bool = False, arg_names: Sequence[str] | None = None) -> None:
        """Write the last call's compiled entry, as an inference program, to `path` (a file
        name or a binary file object; MegEngine's `trace.dump`): serialized StableHLO and a
        JSON manifest, which `partial.load` runs without this code. Parameters are baked in
        unless `keep_params`; `dynamic_batch` makes axis 0 of every input symbolic. Raises
        `ExportError` for a region with graph breaks or one that writes state back (a training
        step, BatchNorm in training mode: call `.eval()` first). `arg_names` (MegEngine's) names
        the Tensor arguments in the manifest, one name each, instead of the parameters' names.
        See the guide, "Exporting a model"."""
        with self._cache.lock:
            dump_region(self, path, dynamic_batch=dynamic_batch, keep_params=keep_params,
                        arg_names=arg_names)

    def export(self, *args: Any, **kwargs: Any) -> jax.export.Exported:
        """The inference forward for arguments like these (Tensors, arrays, or
        `jax.ShapeDtypeStruct`s) as a `jax.export.Exported`, parameters baked in."""
        with self._cache.lock:
            return export_region(self, args, kwargs)

    def cache_clear(self) -> None:
        """Drop every compiled entry (e.g. after rebinding a global the region reads); a
        region that had graph breaks is captured whole again on its next call."""
        with self._cache.lock:
            self._cache.clear()
            self._cache.runner = self._whole()
