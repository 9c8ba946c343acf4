"""Adagrad (MegEngine semantics: eps inside the square root)."""

from __future__ import annotations

from typing import Any

from ..core.creation import full_like, zeros
from ..core.ops import OPS
from ..core.tensors import Tensor
from .optimizer import Fused, Optimizer, Params, require


class Adagrad(Optimizer):
    """t += 1; g += weight_decay * p; square_avg += g^2;
    p -= lr / (1 + (t - 1) * lr_decay) * g / sqrt(square_avg + eps).

    As MegEngine, eps sits inside the square root (PyTorch adds it to the root), and the state
    is `square_avg` and `step`. `initial_accumulator_value` (PyTorch's) starts `square_avg`.

    >>> import eager as eg
    >>> p = eg.Parameter([1.0, 2.0])
    >>> p.grad = eg.tensor([3.0, -4.0])
    >>> Adagrad([p], lr=0.5).step().state[p]["square_avg"].numpy().tolist()
    [9.0, 16.0]
    """

    # MegEngine's Adagrad has no initial_accumulator_value: left out of state_dict() at 0
    megengine_absent = {"initial_accumulator_value": 0.0}

    def __init__(self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0,
                 eps: float = 1e-10, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0):
        for name, value in (("lr", lr), ("lr_decay", lr_decay), ("eps", eps),
                            ("weight_decay", weight_decay),
                            ("initial_accumulator_value", initial_accumulator_value)):
            require(value >= 0, "Adagrad", name, value, ">= 0")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value))

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"square_avg": full_like(param, group["initial_accumulator_value"]),
                "step": zeros((), "int32")}

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        sq, steps = ([self.state[p][k] for p in params] for k in ("square_avg", "step"))
        return Fused(OPS["adagrad_update"],
                     (*params, *grads, *sq, *steps,
                      *(self.hyper(group, k) for k in ("lr", "lr_decay", "eps", "weight_decay"))),
                     {"n": len(params)}, params + sq + steps)
