"""`TracedModule`: what `partial_trace(module)` returns, a Module whose forward is compiled.

It is the wrapped module as far as its users can tell: the same parameters, buffers, names and
state dict (no prefix), `train()` / `eval()` and attribute reads and writes reach the module, and
the traced function's introspection (`cache_info()`, `explain()`, ...) is there too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

import eager.module as M

from .function import TracedFunction

if TYPE_CHECKING:
    import jax

    from xla_segments import Segment

    from .compiled import EntryInfo
    from .region import CacheInfo

_OWN = ("_module", "_traced")


class TracedModule(M.Module):
    """A Module whose calls run `traced` (the compiled forward of `module`).

    >>> import eager as eg, eager.module as M
    >>> from partial import partial_trace
    >>> lin = M.Linear(3, 2)
    >>> fast = partial_trace(lin)
    >>> isinstance(fast, M.Module), fast.weight is lin.weight, list(fast.state_dict())
    (True, True, ['bias', 'weight'])
    >>> fast(eg.ones((4, 3))).shape
    (4, 2)
    """

    def __init__(self, module: M.Module, traced: TracedFunction):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_traced", traced)
        object.__setattr__(self, "structure_version", 0)

    # the wrapped module's mode, read-only (`train()` and `eval()` set it), where Module has a
    # plain attribute: mypy flags a property in its place
    @property
    def training(self) -> bool:  # type: ignore[override]
        return self._module.training

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._traced(*args, **kwargs)

    def _items(self) -> Iterator[tuple[str, Any]]:
        return self._module._items()

    def train(self, mode: bool = True, recursive: bool = True) -> TracedModule:
        """Set the wrapped module's training mode (a different mode compiles its own entry)."""
        self._module.train(mode, recursive)
        return self

    def _set_training(self, mode: bool) -> None:
        """A parent's `train()` reaches this wrapper, not the module inside: set that one's."""
        object.__setattr__(self._module, "training", mode)

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # not set yet (during unpickling): no recursion through the module
            raise AttributeError(name)
        return getattr(self._module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._module, name, value)

    def __repr__(self) -> str:
        return f"partial_trace({self._module!r})"

    # ----- the traced function's introspection ----------------------------------------------
    def cache_info(self) -> CacheInfo:
        return self._traced.cache_info()

    def cache_clear(self) -> None:
        self._traced.cache_clear()

    def explain(self) -> str:
        return self._traced.explain()

    def entries(self) -> list[EntryInfo]:
        return self._traced.entries()

    def segments(self) -> list[Segment]:
        return self._traced.segments()

    def flat_inputs(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self._traced.flat_inputs(*args, **kwargs)

    def dump(self, path: str | os.PathLike | BinaryIO, *, dynamic_batch: bool = False,
             keep_params: bool = False) -> None:
        self._traced.dump(path, dynamic_batch=dynamic_batch, keep_params=keep_params)

    def export(self, *args: Any, **kwargs: Any) -> jax.export.Exported:
        return self._traced.export(*args, **kwargs)
