"""Parameters read as constants: no step gives them a gradient.

MegEngine's `BatchNorm2d(freeze=True)` (the zoo detectors' "FrozenBN") reads its affine
parameters detached, and the zoo's training scripts hand them to the optimizer all the same.
An optimizer that predicts, before any step, which parameters its first step updates
(`Optimizer._prefetch`) asks here which ones will get no gradient. A module that reads some of
its parameters as constants registers itself and says which, as they are at the time of asking
(`constant_parameters()`); modules are held weakly.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol


class Reader(Protocol):
    """A module that may read some of its parameters as constants."""

    def constant_parameters(self) -> list[Any]:
        """The parameters it reads as constants now (none, when it reads them as usual)."""


_readers: weakref.WeakSet = weakref.WeakSet()


def register(module: Reader) -> None:
    """Note `module`, whose `constant_parameters()` is asked by `constant_parameters()`."""
    _readers.add(module)


def constant_parameters() -> list[Any]:
    """The parameters the live registered modules read as constants now."""
    return [p for module in list(_readers) for p in module.constant_parameters()]
