"""eager.distributed (`import eager.distributed as dist`): data-parallel training on jax's own
machinery, in two styles that compose with `partial_trace` and `xla_trace`.

Global arrays (one program for any number of devices and processes): `mesh`, `shard_batch`,
`replicate`; ops then run SPMD and XLA inserts the gradient all-reduce. `shard_params` splits
parameters and optimizer state over the mesh instead (ZeRO / FSDP); `save_checkpoint` and
`load_checkpoint` write and read such state sharded (each process its own parts, via orbax).

MegEngine's per-rank style (each process a rank holding local tensors): `launcher`,
`init_process_group`, `get_rank`, `get_world_size`, `group_barrier`, the collectives in
`dist.functional`, `make_allreduce_cb` and `bcast_list_`; inside a compiled region the
collectives are compiled too (the region runs under `shard_map` over `rank_mesh()`, whose axis
is `RANK_AXIS`).
"""

from . import functional
from .arrays import mesh, replicate, shard_batch
from .checkpoint import PendingSave, checkpoint_steps, load_checkpoint, save_checkpoint
from .group import (
    RANK_AXIS,
    get_rank,
    get_world_size,
    group_barrier,
    init_process_group,
    is_distributed,
    rank_mesh,
)
from .helper import bcast_list_, make_allreduce_cb
from .launcher import Launcher, launcher
from .sharding import shard_params

__all__ = ["mesh", "shard_batch", "replicate", "shard_params", "save_checkpoint",
           "load_checkpoint", "checkpoint_steps", "PendingSave", "init_process_group",
           "is_distributed", "get_rank", "get_world_size", "group_barrier", "launcher",
           "Launcher", "functional", "make_allreduce_cb", "bcast_list_", "rank_mesh",
           "RANK_AXIS"]
