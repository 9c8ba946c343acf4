"""Collectives over the ranks of the process group (MegEngine's
`megengine.distributed.functional`), differentiable, each one pure jax function registered as
a `Collective` op. Every rank must call the same collectives in the same order, with tensors of
the same shape and dtype.

>>> import eager as eg
>>> all_reduce_sum(eg.tensor([1.0, 2.0])).numpy().tolist()  # one process: the input itself
[1.0, 2.0]
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from ..errors import DistributedError
from ..ops.registry import defop
from ..tensors import Tensor, apply
from .collective import Collective
from .group import AXIS, get_world_size


@defop("dist.all_reduce_sum", cls=Collective)
def _all_reduce_sum(x):
    return lax.psum(x, AXIS)


# pmax / pmin have no derivative in jax; over the gathered values, max and min do (the gradient
# goes to the ranks that hold the extreme value).
@defop("dist.all_reduce_max", cls=Collective)
def _all_reduce_max(x):
    return jnp.max(lax.all_gather(x, AXIS), axis=0)


@defop("dist.all_reduce_min", cls=Collective)
def _all_reduce_min(x):
    return jnp.min(lax.all_gather(x, AXIS), axis=0)


@defop("dist.all_gather", cls=Collective)
def _all_gather(x):
    return lax.all_gather(x, AXIS, tiled=x.ndim > 0)


@defop("dist.broadcast", cls=Collective)
def _broadcast(x, *, src):
    return lax.psum(jnp.where(lax.axis_index(AXIS) == src, x, jnp.zeros_like(x)), AXIS)


@defop("dist.reduce_scatter_sum", cls=Collective)
def _reduce_scatter_sum(x):
    return lax.psum_scatter(x, AXIS, scatter_dimension=0, tiled=True)


def all_reduce_sum(x: Tensor) -> Tensor:
    """The elementwise sum of `x` over all ranks, on every rank."""
    return apply(_all_reduce_sum, x)


def all_reduce_max(x: Tensor) -> Tensor:
    """The elementwise maximum of `x` over all ranks, on every rank."""
    return apply(_all_reduce_max, x)


def all_reduce_min(x: Tensor) -> Tensor:
    """The elementwise minimum of `x` over all ranks, on every rank."""
    return apply(_all_reduce_min, x)


def all_gather(x: Tensor) -> Tensor:
    """Every rank's `x` concatenated on axis 0 in rank order (stacked, for a scalar)."""
    return apply(_all_gather, x)


def broadcast(x: Tensor, src: int = 0) -> Tensor:
    """Rank `src`'s `x`, on every rank."""
    world = get_world_size()
    if not 0 <= int(src) < world:
        raise DistributedError(f"broadcast: src {src} is not a rank of a group of {world}")
    return apply(_broadcast, x, src=int(src))


def reduce_scatter_sum(x: Tensor) -> Tensor:
    """The sum over ranks of `x`, split on axis 0: rank r gets the r-th of world_size parts."""
    world = get_world_size()
    shape = _shape(x)
    if not shape or shape[0] % world:
        raise DistributedError(f"reduce_scatter_sum: axis 0 of a tensor of shape {shape} does "
                               f"not split into {world} equal parts, one per rank")
    return apply(_reduce_scatter_sum, x)


def _shape(x: Any) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else ()


__all__ = ["all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather", "broadcast",
           "reduce_scatter_sum"]
