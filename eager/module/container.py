"""Containers beside `Sequential` (`sequential.py`): `ModuleList` names its children by index,
`ModuleDict` by key."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .module import Module, _expand


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




class ModuleDict(Module):
    """A dict of modules, registered so their parameters are found; state-dict names use the
    keys (`heads.cls.weight`), as MegEngine and PyTorch do. Keeps insertion order.

    >>> import eager.module as M
    >>> d = M.ModuleDict({"a": M.Linear(2, 3)})
    >>> d["b"] = M.Linear(3, 1)
    >>> list(d.state_dict())
    ['a.bias', 'a.weight', 'b.bias', 'b.weight']
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None):
        super().__init__()
        self._entries: dict[str, Module] = {}
        if modules is not None:
            self.update(modules)

    def _items(self) -> Iterator[tuple[str, Any]]:
        for name, value in self.__dict__.items():
            if name == "_entries":
                yield from value.items()
            else:
                yield from _expand(name, value)

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(key, str) or not key or "." in key:
            raise KeyError(f"ModuleDict keys are non-empty strings without '.', got {key!r}")
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict holds Modules, got {type(module).__name__} for {key!r}")
        # A new dict, set as an attribute, so captures and guards see the change.
        self._entries = {**self._entries, key: module}

    def __getitem__(self, key: str) -> Module:
        return self._entries[key]

    def __delitem__(self, key: str) -> None:
        entries = dict(self._entries)
        del entries[key]
        self._entries = entries

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def keys(self) -> Iterable[str]:
        return self._entries.keys()

    def values(self) -> Iterable[Module]:
        return self._entries.values()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._entries.items()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for key, m in pairs:
            self[key] = m

    def pop(self, key: str) -> Module:
        m = self._entries[key]
        del self[key]
        return m

    def clear(self) -> None:
        self._entries = {}
