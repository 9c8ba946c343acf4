"""Adam with bias correction (PyTorch / MegEngine semantics); `AdamW` (`adamw.py`) is it with
decoupled weight decay."""

from __future__ import annotations

from typing import Any

from ..core.creation import zeros, zeros_like
from ..core.ops import OPS
from ..core.tensors import Tensor
from .optimizer import Fused, Optimizer, Params


class Adam(Optimizer):
    """t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). `weight_decay` adds an L2 term
    to the gradient."""

    _decoupled = False

    def __init__(self, params: Params, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"{type(self).__name__}: invalid hyper-parameters lr={lr}, "
                             f"betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay,
                                      betas=tuple(betas), eps=eps))

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"exp_avg": zeros_like(param), "exp_avg_sq": zeros_like(param),
                "step": zeros((), "int32")}

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        states = [self.state[p] for p in params]
        m, v, steps = ([s[k] for s in states] for k in ("exp_avg", "exp_avg_sq", "step"))
        beta1, beta2 = self.hyper(group, "betas")
        return Fused(OPS["adam_update"], (*params, *grads, *m, *v, *steps,
                                          self.hyper(group, "lr"), beta1, beta2,
                                          self.hyper(group, "eps"),
                                          self.hyper(group, "weight_decay")),
                     {"n": len(params), "decoupled": self._decoupled}, params + m + v + steps)
