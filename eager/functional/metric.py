"""Metrics (MegEngine's `megengine.functional.metric`): `topk_accuracy`.

>>> import eager as eg, eager.functional as F
>>> F.metric.topk_accuracy(eg.tensor([[0.1, 0.9], [0.8, 0.2]]), eg.tensor([1, 1])).item()
0.5
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.op_errors import require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply
from ._args import _is_int, _t


def topk_accuracy(logits: Any, target: Any, topk: int | Iterable[int] = 1
                  ) -> Tensor | list[Tensor]:
    """The fraction (a float32 scalar) of the rows of `logits` (N, C) whose class `target[i]`
    is among their `k` largest entries. `topk` an int or a tuple of length 1: one tensor;
    several ks: a list of them, in order (as MegEngine). Carries no gradient.

    >>> import eager as eg, eager.functional as F
    >>> logits = eg.tensor([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1]])
    >>> [a.item() for a in F.topk_accuracy(logits, eg.tensor([2, 1]), (1, 2))]
    [0.0, 1.0]
    """
    x, y = _t(logits), _t(target)
    require("topk_accuracy", x, y, topk=topk)  # as the user spells it, for the message
    ks = (topk,) if _is_int(topk) else tuple(topk)
    accs = list(apply(OPS["topk_accuracy"], x, y, topk=tuple(int(k) for k in ks)))
    return accs[0] if len(accs) == 1 else accs


__all__ = ["topk_accuracy"]
