"""Run MegEngine code unchanged: `import megengine...` served by this project.

`alias_megengine()` puts an import hook first on `sys.meta_path`: `megengine` is `eager`,
`megengine.X` is `eager.X`, and `megengine.jit` is `partial` (`megengine.jit.trace` is this
project's `trace`). Each aliased name is the project's module object itself, so
`megengine.functional is eager.functional` and a tensor made through either name is one type.

It is opt-in and never hides a real MegEngine: where `megengine` is installed, `alias_megengine()`
refuses unless called with `shadow=True`. `python -m partial.run_megengine SCRIPT ARGS...` runs a
script with the alias installed. A MegEngine module with no counterpart here raises
`MegEngineAliasError` naming it and, for MegEngine's public modules, saying why (`_WHY_NOT`).

>>> import partial
>>> partial.alias_megengine(shadow=True)
>>> import megengine.functional as F
>>> import eager.functional
>>> F is eager.functional
True
>>> partial.unalias_megengine()
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from .errors import TraceError

# MegEngine's module names whose counterpart here has another name
_RENAMES = {"megengine.jit": "partial"}

# Why MegEngine's public modules that have no counterpart here have none (docs/guide.md lists
# them too). Consulted only when the import fails, so a counterpart added later is served.
_WHY_NOT = {
    "megengine.module.external": "MegEngine's modules that run external engines' models "
                                 "(TensorRT, Atlas, Cambricon, MagicMind) are not implemented",
    "megengine.functional.external": "MegEngine's ops that run external engines' models "
                                     "(TensorRT, Atlas, Cambricon, MagicMind) are not implemented",
    "megengine.functional.inplace": "MegEngine's private in-place add kernel for its optimizers; "
                                    "optimizer updates here are ops that donate their buffers",
    "megengine.functional.tensor_cache": "MegEngine's private cache of constant scalar tensors; "
                                         "jax keeps a program's constants itself",
    "megengine.functional.debug_param": "MegEngine's kernel-search setting "
                                        "(`set_execution_strategy`: heuristic or profiled); XLA "
                                        "chooses kernels here",
    "megengine.traced_module": "MegEngine's TracedModule (editing a model as a graph) is not "
                               "implemented; `partial_trace` compiles a region as it is",
    "megengine.dtr": "dynamic tensor rematerialization is not implemented; "
                     "`partial_trace(remat=True)` recomputes a region's forward in its backward",
    "megengine.jit.dtr_config": "DTR is not implemented; see `partial_trace(remat=...)`",
    "megengine.jit.sublinear_memory_config": "sublinear memory is not implemented; see "
                                             "`partial_trace(remat=...)`",
    "megengine.jit.graph_opt_config": "XLA chooses the graph optimizations of compiled code",
    "megengine.xla": "MegEngine's own XLA lowering; `megengine.jit.xla_trace` (this project's "
                     "`partial.xla_trace`) compiles with XLA here",
    "megengine.amp.convert_format": "the NHWC layout conversion of amp is not implemented",
    "megengine.data.dataset.vision.cityscapes": "the Cityscapes dataset is not implemented",
    "megengine.data.dataset.vision.utils": "MegEngine's dataset download helpers: datasets here "
                                           "read files already on disk",
    **dict.fromkeys(("megengine.data.signal_handling", "megengine.data.tools"),
                    "MegEngine's DataLoader internals (the DataLoader here has its own)"),
    "megengine.distributed.server": "MegEngine's XML-RPC rendezvous server: ranks here meet "
                                    "through jax.distributed (`init_process_group`)",
    "megengine.tools": "MegEngine's command-line tools",
    "megengine.utils": "MegEngine's internal utilities",
    "megengine.experimental": "MegEngine's experimental APIs",
    "megengine.version": "this project is not a MegEngine release; "
                         "`importlib.metadata.version('partial-trace')` gives its version",
    "megengine.conftest": "MegEngine's own test configuration",
}


class MegEngineAliasError(TraceError, ImportError):
    """`alias_megengine()` cannot install the alias (a real MegEngine is there), or a
    `megengine.X` that a script imports has no counterpart in this project."""


def target(name: str) -> str:
    """The module of this project that serves MegEngine's module `name`.

    >>> target("megengine.module.normalization"), target("megengine.jit")
    ('eager.module.normalization', 'partial')
    """
    for prefix, to in _RENAMES.items():
        if name == prefix or name.startswith(prefix + "."):
            return to + name[len(prefix):]
    return "eager" + name[len("megengine"):]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _is_aliased(name: str) -> bool:
    return _under(name, "megengine")


def _missing(name: str, served: str) -> MegEngineAliasError:
    """The error for MegEngine's module `name`, whose counterpart `served` does not exist."""
    why = [r for p, r in _WHY_NOT.items() if _under(name, p)]
    return MegEngineAliasError(
        f"`{name}` has no counterpart in this project (it would be `{served}`)"
        + (f": {why[0]}. " if why else ". ")
        + "docs/guide.md ('Running MegEngine code unchanged') lists the MegEngine modules "
        "served and those that are not; import the project's module directly, or open an "
        "issue naming the MegEngine API the script needs.")


def _register_loaded(name: str, served: str) -> None:
    """Enter the submodules of `served` imported so far in `sys.modules` under MegEngine's names
    too. Loaded afresh through the alias, `megengine.amp.autocast` would be set by the import
    system as attribute `autocast` of its parent (`eager.amp`), hiding the class of that name
    (and `import megengine.tensor` the function `eager.tensor`); MegEngine imports both at once."""
    for sub, module in list(sys.modules.items()):
        if module is not None and sub.startswith(served + "."):
            sys.modules.setdefault(name + sub[len(served):], module)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The import hook: finds `megengine*` names and loads them as the project's modules."""

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}

    def find_spec(self, name: str, path: Any = None, target_: Any = None) -> Any:
        if not _is_aliased(name):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        served = target(spec.name)
        try:
            module = importlib.import_module(served)
        except ModuleNotFoundError as e:
            if e.name is None or not _under(served, e.name):
                raise
            raise _missing(spec.name, served) from None
        self._specs[served] = module.__spec__
        _register_loaded(spec.name, served)
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the project's module is already imported. The import system has
        just set its `__spec__` to the alias's; it gets its own back, so its relative imports
        and `importlib.reload` keep working."""
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


def _real_megengine() -> str | None:
    """Where an installed MegEngine lives, or None."""
    for finder in sys.meta_path:
        if isinstance(finder, _Alias):
            continue
        find = getattr(finder, "find_spec", None)
        spec = find("megengine", None) if find is not None else None
        if spec is not None:
            return str(spec.origin or spec.submodule_search_locations)
    return None


def alias_megengine(shadow: bool = False) -> None:
    """Serve `import megengine...` from this project, so MegEngine scripts run unchanged.

    Idempotent. Refuses with `MegEngineAliasError` where a real MegEngine is installed, unless
    `shadow=True`: then this project is served in its place for the rest of the process.
    """
    if any(isinstance(f, _Alias) for f in sys.meta_path):
        return
    loaded = [n for n, m in sys.modules.items() if _is_aliased(n) and m is not None]
    real = None if shadow else _real_megengine()
    if real is not None or (loaded and not shadow):
        raise MegEngineAliasError(
            f"a real MegEngine is {'installed at ' + real if real else 'already imported'}; "
            "the alias would hide it. Call alias_megengine(shadow=True) (or run "
            "`python -m partial.run_megengine --shadow ...`) to use this project in its place.")
    for name in loaded:
        del sys.modules[name]
    sys.meta_path.insert(0, _Alias())


def unalias_megengine() -> None:
    """Remove the alias and forget the `megengine*` modules it served."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Alias)]
    for name in [n for n in sys.modules if _is_aliased(n)]:
        del sys.modules[name]
