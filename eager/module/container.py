"""Containers whose children are named by index: `Sequential` and `ModuleList`."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from .module import Module


class _Indexed(Module):
    """Children stored as attributes "0", "1", ... so names read `layer1.0.conv1.weight`."""

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        for m in modules:
            self.append(m)

    def _list(self) -> list[Module]:
        return [v for k, v in self.__dict__.items() if k.isdigit()]

    def append(self, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__} holds Modules, got {type(module).__name__}")
        setattr(self, str(len(self)), module)

    def __len__(self) -> int:
        return sum(1 for k in self.__dict__ if k.isdigit())

    def __iter__(self) -> Iterator[Module]:
        return iter(self._list())

    def __getitem__(self, i: int | slice) -> Any:
        items = self._list()
        return self._of(items[i]) if isinstance(i, slice) else items[i]

    @classmethod
    def _of(cls, modules: list[Module]) -> _Indexed:
        """A container of the same kind holding `modules` (a slice)."""
        return cls(modules)

    def __setitem__(self, i: int, module: Module) -> None:
        setattr(self, str(range(len(self))[i]), module)


class ModuleList(_Indexed):
    """A list of modules, registered so their parameters are found."""

    def extend(self, modules: Iterable[Module]) -> None:
        for m in modules:
            self.append(m)


class Sequential(_Indexed):
    """Calls its modules in order. Takes modules, or one OrderedDict of name -> module."""

    def __init__(self, *modules: Any):
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            super().__init__()
            for name, m in modules[0].items():
                setattr(self, name, m)
        else:
            super().__init__(modules)

    @classmethod
    def _of(cls, modules: list[Module]) -> Sequential:
        return cls(*modules)

    def _list(self) -> list[Module]:
        return [v for k, v in self.__dict__.items() if isinstance(v, Module)]

    def __len__(self) -> int:
        return len(self._list())

    def forward(self, x: Any) -> Any:
        for m in self._list():
            x = m(x)
        return x
