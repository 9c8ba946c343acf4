"""What the decorators share: their options, checked into one `Settings`, and the decorator they
return, which makes a Module a `TracedModule` and any other callable a `TracedFunction`. The
decorators themselves live in the modules of MegEngine's names: `partial_trace` in
`partial_tracing.py`, `xla_trace` in `xla_backend.py`, `trace` and `exclude_from_trace` in
`tracing.py`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, overload

import eager.module as M
from xla_segments import REMAT_VALUES

from .function import TracedFunction
from .module import TracedModule
from .settings import Settings

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


def make(fn: Callable | None, kind: str, differentiable: bool, capture_as_const: bool,
         options: dict[str, Any], donate: bool = False, graph_breaks: bool = False,
         without_host: bool = False, trace_gmcallback: bool = False,
         remat: bool | str = False) -> Any:
    """The decorator `kind` with these options (checked here), applied to `fn` if given."""
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


def _remat(kind: str, remat: Any) -> bool | str:
    if not any(remat is v or isinstance(remat, str) and remat == v for v in REMAT_VALUES):
        raise ValueError(f"{kind}(remat={remat!r}): remat is False, True or 'dots'")
    return remat


def one_function(kind: str, fn: Callable | None, func: Callable | None) -> Callable | None:
    """The function given positionally or as MegEngine's `func=` (not both)."""
    if fn is not None and func is not None:
        raise TypeError(f"{kind}() got the function twice (positionally and as func=)")
    return fn if fn is not None else func

