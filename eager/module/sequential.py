"""`Sequential` (MegEngine's `megengine.module.sequential`): children named by index, called in
order."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .container import _Indexed
from .module import Module


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
