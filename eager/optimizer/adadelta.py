"""Adadelta (MegEngine / PyTorch semantics)."""

from __future__ import annotations

from typing import Any

from ..core.creation import zeros, zeros_like
from ..core.ops import OPS
from ..core.tensors import Tensor
from .optimizer import Fused, Optimizer, Params, require


class Adadelta(Optimizer):
    """g += weight_decay * p; square_avg = rho * square_avg + (1 - rho) * g^2;
    delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g;
    acc_delta = rho * acc_delta + (1 - rho) * delta^2; p -= lr * delta.

    The state is `square_avg`, `acc_delta` and `step` (counted, as MegEngine does, though the
    rule does not use it).
    """

    def __init__(self, params: Params, lr: float = 1.0, rho: float = 0.9,
                 eps: float = 1e-6, weight_decay: float = 0.0):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            require(value >= 0, "Adadelta", name, value, ">= 0")
        require(0 <= rho <= 1, "Adadelta", "rho", rho, "in [0, 1]")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"square_avg": zeros_like(param), "acc_delta": zeros_like(param),
                "step": zeros((), "int32")}

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        sq, acc, steps = ([self.state[p][k] for p in params]
                          for k in ("square_avg", "acc_delta", "step"))
        return Fused(OPS["adadelta_update"],
                     (*params, *grads, *sq, *acc, *steps,
                      *(self.hyper(group, k) for k in ("lr", "rho", "eps", "weight_decay"))),
                     {"n": len(params)}, params + sq + acc + steps)
