"""SGD with momentum, Nesterov momentum and weight decay (PyTorch / MegEngine semantics)."""

from __future__ import annotations

from typing import Any

from ..core.creation import zeros_like
from ..core.ops import OPS
from ..core.tensors import Tensor
from .optimizer import Fused, Optimizer, Params


class SGD(Optimizer):
    """buf = momentum * buf + (grad + weight_decay * p); p -= lr * buf
    (or lr * (g + momentum * buf) with `nesterov`). `buf` starts at zero, so the first step
    moves by lr * grad.
    """

    structural_hypers = ("momentum",)
    megengine_absent = {"nesterov": False}  # MegEngine's SGD has no nesterov

    def __init__(self, params: Params, lr: float, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: lr, momentum and weight_decay must be >= 0, got lr={lr}, "
                             f"momentum={momentum}, weight_decay={weight_decay}")
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov momentum needs momentum > 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov,
                                      weight_decay=weight_decay))

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"momentum_buffer": zeros_like(param)} if group["momentum"] else {}

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        lr, wd = self.hyper(group, "lr"), self.hyper(group, "weight_decay")
        if not group["momentum"]:
            return Fused(OPS["sgd_plain_update"], (*params, *grads, lr, wd),
                         {"n": len(params)}, params)
        bufs = [self._buffer(p) for p in params]
        return Fused(OPS["sgd_update"], (*params, *grads, *bufs, lr,
                                         self.hyper(group, "momentum"), wd),
                     {"n": len(params), "nesterov": bool(group["nesterov"])}, params + bufs)

    def _buffer(self, p: Tensor) -> Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:  # momentum switched on after construction
            state["momentum_buffer"] = zeros_like(p)
        return state["momentum_buffer"]
