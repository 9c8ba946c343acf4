"""`megengine*` imports served by this project: `megengine.X` is `eager.X`, `megengine.jit` is
`partial`. What a user does to port a script ("change the imports"), done for them, so the
parity cases run unchanged on both sides."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

_RENAMES = {"megengine.jit": "partial"}


def target(name: str) -> str:
    """The project module that serves the MegEngine module `name`."""
    for prefix, to in _RENAMES.items():
        if name == prefix or name.startswith(prefix + "."):
            return to + name[len(prefix):]
    return "eager" + name[len("megengine"):]


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any = None, target_: Any = None) -> Any:
        if name != "megengine" and not name.startswith("megengine."):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: Any) -> Any:
        return importlib.import_module(target(spec.name))

    def exec_module(self, module: Any) -> None:
        """Nothing to run: the project module is already imported."""


def install() -> None:
    """Make `import megengine...` import this project's modules (idempotent)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
