"""Importing a repository's `hubconf.py` as a module, and checking that the modules it names
as dependencies can be imported."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from types import ModuleType

from .const import HUBCONF
from .exceptions import HubconfError, InvalidRepo


def load_hubconf(repo_dir: str) -> ModuleType:
    """`repo_dir/hubconf.py`, run as a module with `repo_dir` first on `sys.path` while it runs,
    so that its imports of the repository's own packages find them."""
    path = os.path.join(repo_dir, HUBCONF)
    if not os.path.isfile(path):
        raise InvalidRepo(f"eager.hub: {repo_dir} has no {HUBCONF}: a repository used through "
                          f"eager.hub defines its entries in {HUBCONF} at its top level")
    spec = importlib.util.spec_from_file_location("hubconf", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    before = sys.modules.get("hubconf")
    sys.path.insert(0, repo_dir)
    sys.modules["hubconf"] = module  # while it runs: dataclasses and pickling look it up there
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        if e.name != "megengine" and not (e.name or "").startswith("megengine."):
            raise
        raise HubconfError(
            f"eager.hub: {path} imports {e.name}, MegEngine code: install the alias that serves "
            f"`megengine` from this project first (`import partial; "
            f"partial.alias_megengine()`)") from e
    finally:
        with contextlib.suppress(ValueError):  # hubconf may have taken it out itself
            sys.path.remove(repo_dir)
        if before is None:
            sys.modules.pop("hubconf", None)
        else:
            sys.modules["hubconf"] = before
    return module


def check_module_exists(name: str) -> bool:
    """Whether module `name` (dotted or not) can be imported, without importing it (a dotted
    name imports its parent packages)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package; a module with no spec
        return False
