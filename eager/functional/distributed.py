"""Collectives over the ranks of the process group (MegEngine's
`megengine.functional.distributed`; `eager.distributed.functional` too), differentiable, each
one pure jax function registered as a `Collective` op (`eager/core/ops/collective.py`). Every
rank must call the same collectives in the same order, with tensors of the same shape and
dtype.

>>> import eager as eg
>>> all_reduce_sum(eg.tensor([1.0, 2.0])).numpy().tolist()  # one process: the input itself
[1.0, 2.0]
"""

from __future__ import annotations

from typing import Any

from ..core.errors import DistributedError
from ..core.ops import collective as ops
from ..core.process_group import get_world_size
from ..core.tensors import Tensor, apply


def all_reduce_sum(x: Tensor) -> Tensor:
    """The elementwise sum of `x` over all ranks, on every rank."""
    return apply(ops.all_reduce_sum, x)


def all_reduce_max(x: Tensor) -> Tensor:
    """The elementwise maximum of `x` over all ranks, on every rank."""
    return apply(ops.all_reduce_max, x)


def all_reduce_min(x: Tensor) -> Tensor:
    """The elementwise minimum of `x` over all ranks, on every rank."""
    return apply(ops.all_reduce_min, x)


def all_gather(x: Tensor) -> Tensor:
    """Every rank's `x` concatenated on axis 0 in rank order (stacked, for a scalar)."""
    return apply(ops.all_gather, x)


def broadcast(x: Tensor, src: int = 0) -> Tensor:
    """Rank `src`'s `x`, on every rank."""
    world = get_world_size()
    if not 0 <= int(src) < world:
        raise DistributedError(f"broadcast: src {src} is not a rank of a group of {world}")
    return apply(ops.broadcast, x, src=int(src))


def reduce_scatter_sum(x: Tensor) -> Tensor:
    """The sum over ranks of `x`, split on axis 0: rank r gets the r-th of world_size parts."""
    world = get_world_size()
    shape = _shape(x)
    if not shape or shape[0] % world:
        raise DistributedError(f"reduce_scatter_sum: axis 0 of a tensor of shape {shape} does "
                               f"not split into {world} equal parts, one per rank")
    return apply(ops.reduce_scatter_sum, x)


def _shape(x: Any) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else ()


__all__ = ["all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather", "broadcast",
           "reduce_scatter_sum"]

# Defined here, below `eager.module` (SyncBatchNorm uses them) and `eager.distributed` (which
# shards modules); MegEngine's home of them is `megengine.distributed.functional`, which
# re-exports them, and that is where pickles and reprs name them.
for _name in __all__:
    globals()[_name].__module__ = "eager.distributed.functional"
