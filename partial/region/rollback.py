"""Putting a failed region back, written once for both engines (the capture and the lazy
recorder): the tensors it changed get their old storage, history and `.grad` again
(`Snapshots`), the tensors it made that never received a value raise on use
(`invalidate`), and a capture that ended in an exception lets go of its jax trace
(`release_trace`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import eager as eg
from eager.hooks import describe_location, user_location

from ..errors import InvalidTensorError

hooks = eg.hooks

try:  # the trace `jax.make_jaxpr` is running; jax has no public name for it
    from jax._src.core import trace_ctx as _trace_ctx
except ImportError:  # another jax: nothing to release by hand
    _trace_ctx = None  # type: ignore[assignment]


def current_trace() -> Any:
    """The jax trace running now (inside `jax.make_jaxpr`: its jaxpr trace), or None."""
    return None if _trace_ctx is None else _trace_ctx.trace


def release_trace(trace: Any) -> None:
    """Let go of what the jaxpr trace `trace` holds, after the function it traced raised.

    jax clears a trace's frame when `make_jaxpr` returns but not when the function raises:
    the frame's equations hold its tracers, each constant tracer's finalizer holds the trace,
    and so the frame, with every array the capture lifted, stays alive for the whole process.
    A region that breaks on its first call would keep its parameters' old arrays (and make
    the donating optimizer update copy each of them)."""
    invalidate = getattr(trace, "invalidate", None)
    if invalidate is not None and type(trace).__name__ == "DynamicJaxprTrace":
        invalidate()


class Snapshots(dict):
    """The tensors a region changed, by id: (tensor, what it held before the call)."""

    def save(self, t: Any) -> None:
        """Remember what `t` holds now, unless it was saved already."""
        if id(t) not in self:
            self[id(t)] = (t, hooks.snapshot(t))

    def restore_all(self) -> None:
        """Give every saved tensor back what it held, and forget them."""
        for t, snap in self.values():
            hooks.restore(t, snap)
        self.clear()


def invalidate_unfinished(tensors: Iterable[Any], unfinished: Callable[[Any], bool]) -> None:
    """Make each live tensor of `tensors` whose storage is `unfinished` (a tracer, a lazy
    placeholder) raise on use, naming the user's line that failed."""
    where = describe_location(user_location())
    for t in tensors:
        if t is not None and unfinished(hooks.data(t)):
            invalidate(t, where)


def invalidate(t: Any, where: str) -> None:
    """Make `t`, created inside a capture that failed, raise on any use instead of holding a
    tracer: its class becomes a subclass whose storage is a property that raises."""
    message = (f"this tensor was created inside a traced region ({where}) whose capture "
               "failed, so it never received a value; compute it again outside the region")

    def fail(self: Any) -> Any:
        raise InvalidTensorError(message)

    hooks.set_data(t, None)
    t.__class__ = type("InvalidTensor", (type(t),), {
        "__slots__": (), "_data": property(fail), "__repr__": lambda self: "<invalid tensor>"})
