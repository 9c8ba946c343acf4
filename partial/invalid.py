"""Tensors left without a value by a region that failed."""

from __future__ import annotations

from typing import Any

import eager as eg

from .errors import InvalidTensorError

hooks = eg.hooks


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
