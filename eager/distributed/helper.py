"""Helpers of the per-rank style (MegEngine's `megengine.distributed.helper`): a GradManager
callback that all-reduces gradients, and an in-place broadcast of parameters from rank 0."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..autodiff import no_grad
from ..core.tensors import Tensor, rebind
from .functional import all_reduce_sum, broadcast
from .group import get_world_size


def make_allreduce_cb(reduce_method: str = "sum") -> Callable[[Tensor, Tensor], Tensor]:
    """A `GradManager.attach` callback that replaces each gradient by its sum (or mean) over
    all ranks: `gm.attach(params, callbacks=[dist.make_allreduce_cb("mean")])`."""
    if reduce_method not in ("sum", "mean"):
        raise ValueError(f"make_allreduce_cb: reduce_method must be 'sum' or 'mean', "
                         f"got {reduce_method!r}")

    def allreduce(param: Tensor, grad: Tensor) -> Tensor:
        total = all_reduce_sum(grad)
        return total / get_world_size() if reduce_method == "mean" else total

    return allreduce


def bcast_list_(tensors: Iterable[Tensor]) -> None:
    """Set every tensor to rank 0's value, in place (parameters before training starts, so all
    ranks begin from the same model)."""
    with no_grad():
        for t in tensors:
            rebind(t, broadcast(t, src=0))
