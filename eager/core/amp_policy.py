"""The autocast rules of `eager.amp`, and the per-thread state the dispatcher reads.

Each op carries its own rule, `Op.amp` (set by `defop(..., amp=LOW)`): `LOW` (the matmul class:
its floating inputs are cast to the low precision type) or `FLOAT32` (reductions, softmax,
normalization, losses: their low precision inputs are cast to float32). Ops without a rule run
on the dtypes they are given, promoting as jax does (a float16 activation plus a float32 bias
is float32). The dispatcher (`tensors.apply`) reads `state` once per call; only inside
`autocast` is it set, and only then does it read the op's rule. The casts are ordinary `astype`
ops: they are recorded on the tape and captured like any op, and their vjp casts each cotangent
back, so gradients reach float32 parameters in float32.

Where low precision pays: the matmul class (tensor cores, half the memory traffic). Where it
does not: accumulations and exponentials, whose float16 sums overflow and lose small terms
(max, min and argmax are exact in any precision and have no rule).

`state` is a `contextvars.ContextVar`, not a module global: autocast in one thread never changes
what another computes. This module imports nothing from the rest of `eager`.
"""

from __future__ import annotations

import contextvars
from typing import Any

import jax.numpy as jnp
import numpy as np

LOW, FLOAT32 = "low", "float32"

LOW_TYPES = {"float16": np.dtype(jnp.float16), "bfloat16": np.dtype(jnp.bfloat16)}
_F32 = np.dtype(np.float32)
# float64 is left as it is (as in PyTorch): a user who asks for it wants it
_CASTABLE = frozenset({_F32, *LOW_TYPES.values()})

#: the low precision type inside `autocast` in this thread, None outside (or where disabled)
state: contextvars.ContextVar[np.dtype | None] = contextvars.ContextVar("eager_autocast",
                                                                        default=None)


def cast_inputs(op: Any, inputs: tuple, low: np.dtype, tensor_type: type[Any]) -> tuple:
    """`inputs` of `op` (an `Op`) as autocast to `low` computes it: its floating Tensors cast
    to the type its rule `op.amp` gives, everything else as it is."""
    rule = op.amp
    if rule is None:
        return inputs
    target = low if rule == LOW else _F32
    return tuple(x.astype(target) if isinstance(x, tensor_type) and x.dtype != target
                 and x.dtype in _CASTABLE else x for x in inputs)


# ----- skipping an optimizer step inside a traced region (see GradScaler.unscale) ---------------
_skip: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("eager_amp_skip",
                                                                    default=None)


def skip_next_update(owner: Any, found: Any, tensors: list) -> None:
    """Inside the capture `owner`: the next optimizer update of any of `tensors` keeps the old
    values wherever the 0-d bool Tensor `found` is true (a gradient was not finite). A traced
    region cannot read `found` to drop the gradients, as eager code does."""
    _skip.set((owner, found, {id(t) for t in tensors}, tensors))  # holds them: ids stay theirs


def pending_skip(owner: Any, tensors: list) -> Any:
    """The `found` flag that guards an update of `tensors` inside the capture `owner`, or None
    (a flag another capture left is dropped)."""
    pending = _skip.get()
    if pending is None:
        return None
    if pending[0] is not owner:  # set by another (finished) capture
        _skip.set(None)
        return None
    if not any(id(t) in pending[2] for t in tensors):
        return None
    return pending[1]
