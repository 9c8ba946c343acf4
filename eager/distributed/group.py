"""MegEngine's `megengine.distributed.group`: the process group of MegEngine's per-rank style,
this process's rank among `world_size` processes started together (defined in the core,
`eager/core/process_group.py`, where SyncBatchNorm and the collectives reach it)."""

from ..core.process_group import (
    AXIS,
    RANK_AXIS,
    Group,
    check_port,
    free_port,
    get_rank,
    get_world_size,
    group,
    group_barrier,
    init_process_group,
    is_distributed,
    rank_mesh,
)

__all__ = ["init_process_group", "is_distributed", "get_rank", "get_world_size", "group_barrier",
           "rank_mesh", "RANK_AXIS", "AXIS", "Group", "group", "free_port", "check_port"]
