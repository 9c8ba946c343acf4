"""Every public module path of `eager` and the names it offers import as they did before the
tensor core moved under `eager/core/` (`public_names.json`: each public module, its `__all__`
or else the classes and functions it defines, as the layout before the move had them). MegEngine
code imports by these paths (`megengine.module.conv`, `megengine.distributed.group`, ...), so
an internal move must leave each one importable; a name that leaves on purpose leaves this
file in the same change."""

import importlib
import json
from pathlib import Path

import pytest

PUBLIC = json.loads((Path(__file__).parent / "public_names.json").read_text())


@pytest.mark.parametrize("path", sorted(PUBLIC))
def test_a_public_module_imports_with_its_names(path):
    module = importlib.import_module(path)
    missing = [name for name in PUBLIC[path] if not hasattr(module, name)]
    assert not missing, f"{path} no longer offers {missing}"

