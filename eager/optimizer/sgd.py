"""SGD with momentum, Nesterov momentum and weight decay (PyTorch / MegEngine semantics)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import hooks
from ..creation import zeros_like
from ..ops import OPS
from ..tensor import Tensor, apply
from .optimizer import Optimizer


class SGD(Optimizer):
    """buf = momentum * buf + (grad + weight_decay * p); p -= lr * buf
    (or lr * (g + momentum * buf) with `nesterov`). `buf` starts at zero, so the first step
    moves by lr * grad.
    """

    structural_hypers = ("momentum",)

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.0,
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

    def _update(self, p: Tensor, group: dict[str, Any]) -> None:
        lr, wd = self.hyper(group, "lr"), self.hyper(group, "weight_decay")
        state = self.state[p]
        if not group["momentum"]:
            self._set(p, apply(OPS["sgd_plain_update"], p, p.grad, lr, wd))
            return
        if "momentum_buffer" not in state:  # momentum switched on after construction
            state["momentum_buffer"] = zeros_like(p)
            hooks.bump_epoch()
        buf = state["momentum_buffer"]
        new_p, new_buf = apply(OPS["sgd_update"], p, p.grad, buf, lr,
                               self.hyper(group, "momentum"), wd,
                               nesterov=bool(group["nesterov"]))
        self._set(p, new_p)
        self._set(buf, new_buf)
