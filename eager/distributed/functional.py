"""MegEngine's `megengine.distributed.functional`: the collectives, defined in
`eager.functional.distributed` (`F.distributed`), where eager's functions on Tensors live.

>>> import eager as eg, eager.distributed as dist
>>> dist.functional.all_reduce_sum(eg.tensor([1.0, 2.0])).numpy().tolist()  # one process
[1.0, 2.0]
"""

from ..functional.distributed import (
    all_gather,
    all_reduce_max,
    all_reduce_min,
    all_reduce_sum,
    broadcast,
    reduce_scatter_sum,
)

__all__ = ["all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather", "broadcast",
           "reduce_scatter_sum"]
