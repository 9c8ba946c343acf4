"""The process group of MegEngine's per-rank style: this process's rank among `world_size`
processes started together, and the mesh of one device per process that collectives run over.

It is set once per process (`init_process_group`, which starts `jax.distributed`), so it is
plain module state, not per-thread: every thread of a rank is that rank.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from .errors import DistributedError

AXIS = RANK_AXIS = "rank"  # the mesh axis of the process group; collectives reduce over it


@dataclass(frozen=True)
class Group:
    rank: int
    world_size: int
    mesh: Mesh  # one device per process, in rank order, on axis AXIS


_group: Group | None = None
_single: Group | None = None


def init_process_group(master_ip: str, port: int, world_size: int, rank: int, device: int = 0,
                       backend: str | None = None) -> None:
    """Join the group of `world_size` processes whose coordinator listens on
    `master_ip:port` (rank 0 starts it), as rank `rank`, using local device `device`.

    Call it first thing in each process, before any tensor is made: it starts
    `jax.distributed`, which must come before jax uses a device. On CPU the collectives run
    over gloo (`backend` "gloo", the default; "mpi" where jaxlib was built with it).
    """
    global _group
    if _group is not None:
        raise DistributedError(f"init_process_group: this process already joined a group as rank "
                               f"{_group.rank} of {_group.world_size}; call it once per process")
    world_size, rank = int(world_size), int(rank)
    if world_size < 1 or not 0 <= rank < world_size:
        raise DistributedError(f"init_process_group: rank {rank} is not in [0, {world_size}) "
                               f"for world_size {world_size}")
    jax.config.update("jax_cpu_collectives_implementation", backend or "gloo")
    if world_size > 1:
        try:
            jax.distributed.initialize(f"{master_ip}:{int(port)}", num_processes=world_size,
                                       process_id=rank, local_device_ids=[int(device)])
        except RuntimeError as e:
            raise DistributedError(
                f"init_process_group(rank={rank}, world_size={world_size}) failed: {e}. It "
                f"must run before jax uses any device (before the first tensor is made), once "
                f"per process; is {master_ip}:{port} reachable and the port free?") from e
    _group = Group(rank, world_size, _mesh_of_ranks(world_size))


def _mesh_of_ranks(world_size: int) -> Mesh:
    """One device per process (its first), in rank order (jax's process index is the rank)."""
    if world_size == 1:
        return Mesh(np.array(jax.local_devices()[:1]), (AXIS,))
    firsts: dict[int, jax.Device] = {}
    for d in jax.devices():
        if d.process_index not in firsts or d.id < firsts[d.process_index].id:
            firsts[d.process_index] = d
    return Mesh(np.array([firsts[r] for r in range(world_size)]), (AXIS,))


def group() -> Group:
    """The process group, or a group of this process alone when none was initialised (the
    collectives then return their input, as with one rank)."""
    global _single
    if _group is not None:
        return _group
    if _single is None:
        _single = Group(0, 1, _mesh_of_ranks(1))
    return _single


def rank_mesh() -> Mesh:
    """The mesh of one device per rank, in rank order, on the axis `RANK_AXIS` ("rank") that
    the per-rank collectives reduce over (one device when no group was initialised)."""
    return group().mesh


def is_distributed() -> bool:
    """Whether `init_process_group` ran in this process."""
    return _group is not None


def get_rank() -> int:
    """This process's rank (0 when no group was initialised)."""
    return group().rank


def get_world_size() -> int:
    """The number of processes in the group (1 when no group was initialised)."""
    return group().world_size


def group_barrier() -> None:
    """Wait until every process of the group reaches this call."""
    if get_world_size() > 1:
        multihost_utils.sync_global_devices("eager.distributed.group_barrier")


def free_port(host: str = "localhost") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(host: str, port: int) -> None:
    """Raise a clear error if `port` on `host` cannot be listened on (already in use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if os.name != "nt":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as e:
            raise DistributedError(
                f"port {port} on {host} is already in use ({e.strerror}): pass another port, "
                f"or port=0 to let the launcher pick a free one") from e
