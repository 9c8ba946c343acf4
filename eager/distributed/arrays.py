"""The global-array style: one program for any number of devices and processes.

A batch is split over a 1-D `Mesh` of every device of every process, parameters, buffers and
optimizer state are replicated on it, and every op (eager, or compiled by `partial_trace` and
`xla_trace`) runs SPMD: jax takes the placement from the arguments and XLA inserts the
gradient all-reduce. Nothing here moves data between devices by hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..core import device as _device
from ..core.device import DeviceLike
from ..core.errors import DistributedError
from ..core.tensors import Tensor, peek, rebind
from ..module.module import Module
from ..optimizer.optimizer import Optimizer

_default_mesh: Mesh | None = None
_T = TypeVar("_T")


def mesh(devices: Iterable[DeviceLike] | None = None, axis: str = "data") -> Mesh:
    """A 1-D mesh named `axis` over `devices` (default: every device of every process).

    >>> mesh().axis_names
    ('data',)
    """
    devs = jax.devices() if devices is None else [_device.parse(d) for d in devices]
    return Mesh(np.array(devs), (axis,))


def _mesh(m: Mesh | None) -> Mesh:
    global _default_mesh
    if m is not None:
        return m
    if _default_mesh is None or _default_mesh.devices.size != jax.device_count():
        _default_mesh = mesh()
    return _default_mesh


def _place(arr: Any, sharding: NamedSharding) -> jax.Array:
    """`arr` laid out by `sharding`; across processes each passes its own part (its rows of a
    batch, or the whole value of a replicated array)."""
    if jax.process_count() == 1:
        return jax.device_put(arr, sharding)
    return jax.make_array_from_process_local_data(sharding, np.asarray(arr))


def shard_batch(x: Any, mesh: Mesh | None = None, axis: int = 0) -> Tensor:
    """A Tensor holding `x` split over the devices of `mesh` along `axis` (the batch axis).

    In a run of several processes each passes its local part and gets the global batch, whose
    `axis` is the sum of theirs. Data, not a differentiable op: the result has no gradient
    history.

    >>> shard_batch(np.zeros((8, 3), np.float32)).shape
    (8, 3)
    """
    m = _mesh(mesh)
    arr = peek(x) if isinstance(x, Tensor) else x
    shape = np.shape(arr)
    if not -len(shape) <= axis < len(shape):
        raise DistributedError(f"shard_batch: axis {axis} is out of range for shape {shape}")
    axis %= len(shape)
    parts = m.devices.size // jax.process_count()
    if shape[axis] % parts:
        raise DistributedError(
            f"shard_batch: axis {axis} of the batch has {shape[axis]} entries, which do not "
            f"split evenly over the {parts} devices of this process in mesh axis "
            f"{m.axis_names[0]!r}; use a batch size divisible by {parts} (or drop the remainder)")
    spec = PartitionSpec(*([None] * axis), m.axis_names[0])
    return Tensor(_place(arr, NamedSharding(m, spec)))


def replicate(obj: _T, mesh: Mesh | None = None) -> _T:
    """Place a Tensor, a Module's parameters and buffers, or an Optimizer's state replicated on
    every device of `mesh` (in place: the tensors keep their identity); returns `obj`.

    >>> t = replicate(Tensor([1.0, 2.0]))
    >>> t.sharding.is_fully_replicated
    True
    """
    sharding = NamedSharding(_mesh(mesh), PartitionSpec())
    for t in _tensors_of(obj):
        rebind(t, _place(peek(t), sharding), relayout=True)
        _device.set_grad_layout(t, None)  # gradients as they come (not split, as stage 2 has)
    return obj


def _tensors_of(obj: Any) -> list[Tensor]:
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, Module):
        return list(obj.parameters()) + [b for b in obj.buffers() if b is not None]
    if isinstance(obj, Optimizer):
        return [t for slots in obj.state.values() for t in slots.values()]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors_of(item)]
    raise TypeError(f"replicate places a Tensor, a Module, an Optimizer or a list of them, "
                    f"got {type(obj).__name__}")
