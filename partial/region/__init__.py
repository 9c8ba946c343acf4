"""The region: what a call of a traced function is looked up by and what its compiled code
depends on, reads and does, shared by both engines (the capture and the lazy recorder).

`key.py` flattens a call into its guard key; `guards.py` holds the conditions an entry depends
on besides it; `sources.py` the typed inputs and effects of a region; `entry_cache.py` the
per-function cache of entries and pieces; `rollback.py` how a failed call is put back. The
code map is `README.md` beside this file.
"""

from .entry_cache import Cache, CacheInfo, shared_cache
from .guards import (
    ArgumentStateGuard,
    GradPresenceGuard,
    ManagerGuard,
    ModuleGuard,
    OptimizerGuard,
    OptimizerStateGuard,
    Same,
    optimizer_state_signature,
)
from .key import (
    STATIC_TYPES,
    Call,
    argument_paths,
    describe_change,
    flatten_call,
    function_token,
    leaf_text,
    tensor_spec,
)
from .rollback import Snapshots, current_trace, invalidate_unfinished, release_trace
from .sources import (
    Argument,
    Constant,
    GradOf,
    GradSlot,
    Held,
    Hyper,
    Lifted,
    Rebind,
    Result,
    SetAttr,
    SetGrad,
    Source,
    take_value,
)

__all__ = [
    "Cache",
    "CacheInfo",
    "shared_cache",
    "ArgumentStateGuard",
    "GradPresenceGuard",
    "ManagerGuard",
    "ModuleGuard",
    "OptimizerGuard",
    "OptimizerStateGuard",
    "Same",
    "optimizer_state_signature",
    "STATIC_TYPES",
    "Call",
    "argument_paths",
    "describe_change",
    "flatten_call",
    "function_token",
    "leaf_text",
    "tensor_spec",
    "Snapshots",
    "current_trace",
    "invalidate_unfinished",
    "release_trace",
    "Argument",
    "Constant",
    "GradOf",
    "GradSlot",
    "Held",
    "Hyper",
    "Lifted",
    "Rebind",
    "Result",
    "SetAttr",
    "SetGrad",
    "Source",
    "take_value",
]
