"""The hook points through which a capture (the `partial` package) observes eager execution.

Eager code calls these at its few choke points: every read of a tensor's storage by an op, every
rebind of a tensor's storage (`x[i] = v`, optimizer updates, BatchNorm statistics, the RNG key),
every value read (`.numpy()`, `.item()`, `bool()`), every module call and every optimizer
hyper-parameter read. With no capture active (`active is None`) each costs one global lookup.

A capture installs an object implementing `CaptureHooks` with `capturing(hooks)`; nothing else in
eager changes behaviour.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class CaptureHooks:
    """The interface a capture implements; the defaults here are what eager does without one."""

    def read(self, tensor: Any) -> Any:
        """Return the array an op should use for `tensor` (a tracer, during capture)."""
        return tensor._data

    def rebind(self, tensor: Any, value: Any) -> None:
        """Called before `tensor`'s storage is replaced by `value`."""

    def value_read(self, tensor: Any, what: str) -> None:
        """Called before a host read of `tensor`'s value (`what` is e.g. ".item()"); may raise."""

    def created(self, tensor: Any) -> None:
        """Called for every Tensor created while the capture is active."""

    def module_call(self, module: Any) -> None:
        """Called when a Module is called."""

    def hyper(self, owner: Any, key: str, value: Any) -> Any:
        """Return the value an optimizer should use for hyper-parameter `key` of param group
        `owner` (an input array, during capture)."""
        return value


active: CaptureHooks | None = None


@contextlib.contextmanager
def capturing(hooks: CaptureHooks) -> Iterator[CaptureHooks]:
    """Install `hooks` for the duration of the block (nesting restores the outer hooks)."""
    global active
    outer, active = active, hooks
    try:
        yield hooks
    finally:
        active = outer
