"""MegEngine's `megengine.functional.distributed`: the collectives of
`eager.distributed.functional` (`dist.functional`), where they are defined, under the path of
MegEngine's functional package.

`eager.functional` does not import this module while it loads: `eager.distributed` imports
`eager.module`, which imports `eager.functional`, so `F.distributed` is imported on first use.

>>> import eager as eg, eager.functional as F
>>> F.distributed.all_reduce_sum(eg.tensor([1.0, 2.0])).numpy().tolist()  # one process
[1.0, 2.0]
"""

from ..distributed.functional import (
    all_gather,
    all_reduce_max,
    all_reduce_min,
    all_reduce_sum,
    broadcast,
    reduce_scatter_sum,
)

__all__ = ["all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather", "broadcast",
           "reduce_scatter_sum"]
