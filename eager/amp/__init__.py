"""Mixed precision (MegEngine's `megengine.amp`): `autocast` (`autocast.py`) and `GradScaler`
(`grad_scaler.py`).

Inside `autocast`, the matmul class (matmul, linear, convolution, attention) computes in float16
or bfloat16 and reductions, softmax, normalization and losses in float32; each op's rule is its
`amp` attribute (`eager.OPS["conv"].amp`, set by its `defop`), applied by the dispatcher to every
op, eagerly and inside `partial_trace` / `xla_trace` regions alike (the autocast state is part of
their guard key).
Parameters stay float32 (master weights) and their gradients arrive in float32.

`GradScaler` multiplies the loss by a scale so that small float16 gradients do not flush to zero,
divides the gradients by it again, and skips the step where any gradient overflowed. Its scale
and growth counter are Tensors, so a compiled step reads and updates them like any state.

>>> import eager as eg
>>> from eager import amp
>>> with amp.autocast(low_prec_dtype="bfloat16"):
...     y = eg.ones((2, 3)) @ eg.ones((3, 4))
>>> y.dtype.name
'bfloat16'
"""

from .autocast import autocast, autocast_dtype
from .grad_scaler import GradScaler

__all__ = ["autocast", "autocast_dtype", "GradScaler"]
