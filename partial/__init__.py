"""partial: capture and compile regions of eager code.

`partial_trace` compiles a region (typically a backbone) into one XLA forward and backward
segment that joins the eager tape; `xla_trace` compiles a whole training step (forward,
backward, optimizer update) into one executable that updates the model in place;
`exclude_from_trace` marks code to keep eager; `TraceError`
is the base class of every capture error. A region's Python body runs once per guard key (its
side effects, like `print`, happen then), every tensor it reads or updates is an input or output
of the compiled code, and a value read inside it raises `TraceError` naming the line.

A region with graph breaks (an `exclude_from_trace()` block, or a value read under
`graph_breaks=True`) instead re-runs its Python on every call, recording ops lazily and running
each stretch between breaks as a cached compiled segment (`lazy/`); its first
call is captured up to the first break and finished lazily (`lazy/handover.py`).

`fn.dump(path)` writes a region's inference forward as serialized StableHLO that `load(path)`
runs in a process without the code that defined it (`export/`).

Compiled code is kept on disk for later processes, by default in a private per-user directory:
`set_cache_dir` (or `PARTIAL_CACHE_DIR`) moves it or turns it off, `python -m partial.cache`
shows and clears it.

`README.md` beside this file maps the code: its vocabulary, one call through the files, and
which file to open for a change.
"""

from .errors import (
    CacheDirError,
    ExportError,
    ExportFileError,
    InvalidTensorError,
    ModuleRebindError,
    NotDifferentiableError,
    TraceError,
    UnsupportedArgumentError,
    UnsupportedInRegionError,
    UnsupportedOutputError,
    ValueReadError,
)
from .export import Loaded, load
from .function import TracedFunction
from .megengine_alias import MegEngineAliasError, alias_megengine, unalias_megengine
from .module import TracedModule
from .partial_tracing import partial_trace
from .persistent_cache import resolve_at_import as _resolve_cache_dir
from .persistent_cache import set_cache_dir, set_cache_max_size
from .region import CacheInfo
from .tracing import exclude_from_trace, trace
from .xla_backend import xla_trace

__all__ = [
    "partial_trace", "xla_trace", "trace", "exclude_from_trace", "TraceError", "ValueReadError",
    "UnsupportedArgumentError", "UnsupportedOutputError", "ModuleRebindError",
    "UnsupportedInRegionError", "InvalidTensorError", "NotDifferentiableError",
    "TracedFunction", "TracedModule", "CacheInfo", "set_cache_dir", "set_cache_max_size",
    "CacheDirError",
    "load", "Loaded", "ExportError", "ExportFileError",
    "alias_megengine", "unalias_megengine", "MegEngineAliasError",
]

_resolve_cache_dir()
