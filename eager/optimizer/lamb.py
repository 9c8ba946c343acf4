"""LAMB: Adam with a per-tensor trust ratio (MegEngine semantics)."""

from __future__ import annotations

from typing import Any

import jax

from ..core.creation import zeros, zeros_like
from ..core.ops import OPS
from ..core.tensors import Tensor
from .optimizer import Fused, Optimizer, Params, require


class LAMB(Optimizer):
    """Layer-wise adaptive moments (You et al., 2019), per tensor:
    t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    r = (m / c1) / (sqrt(v / c2) + eps) + weight_decay * p, with c = 1 - b^t when
    `bias_correction` (else 1); p -= lr * trust * r, trust = |p| / |r| (1 when a norm is zero,
    or when weight_decay is 0 unless `always_adapt`).

    The arguments are MegEngine's, in its order (`lr` defaults to 1e-3 here); the decay is
    decoupled: it joins the direction after the Adam normalization, not the gradient.
    """

    def __init__(self, params: Params, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 bias_correction: bool = True, weight_decay: float = 0.0,
                 always_adapt: bool = False):
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            require(value >= 0, "LAMB", name, value, ">= 0")
        require(len(betas) == 2 and all(0 <= b < 1 for b in betas), "LAMB", "betas", betas,
                "two numbers in [0, 1)")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay,
                                      betas=tuple(betas), eps=eps,
                                      bias_correction=bool(bias_correction),
                                      always_adapt=bool(always_adapt)))

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {"exp_avg": zeros_like(param), "exp_avg_sq": zeros_like(param),
                "step": zeros((), "int32")}

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        m, v, steps = ([self.state[p][k] for p in params]
                       for k in ("exp_avg", "exp_avg_sq", "step"))
        return Fused(OPS["lamb_update"], (*params, *grads, *m, *v, *steps, *self._hypers(group)),
                     self._attrs(params, group), params + m + v + steps)

    def _hypers(self, group: dict[str, Any]) -> tuple:
        beta1, beta2 = self.hyper(group, "betas")
        return (self.hyper(group, "lr"), beta1, beta2, self.hyper(group, "eps"),
                self.hyper(group, "weight_decay"))

    @staticmethod
    def _attrs(params: list[Tensor], group: dict[str, Any]) -> dict[str, Any]:
        return {"n": len(params), "bias_correction": bool(group["bias_correction"]),
                "always_adapt": bool(group["always_adapt"])}


class LAMBFp16(LAMB):
    """LAMB for float16 parameters: the update runs on a float32 master copy of each parameter
    (state "param_fp32", with float32 moments), and the parameter gets the master's value
    rounded to its own dtype, so steps smaller than float16's resolution still accumulate
    (MegEngine's `LAMBFp16`). Same arguments as `LAMB`."""

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        master = param.detach().astype("float32")
        return {"exp_avg": zeros_like(master), "exp_avg_sq": zeros_like(master),
                "step": zeros((), "int32"), "param_fp32": master}

    def _update(self, params: list[Tensor], group: dict[str, Any]) -> None:
        super()._update(params, group)  # the masters, then each parameter rounded from its own
        self._set(params, tuple(self.state[p]["param_fp32"].astype(p.dtype) for p in params))

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        masters, m, v, steps = ([self.state[p][k] for p in params]
                                for k in ("param_fp32", "exp_avg", "exp_avg_sq", "step"))
        grads = [jax.ShapeDtypeStruct(g.shape, "float32") if isinstance(g, jax.ShapeDtypeStruct)
                 else g.astype("float32") for g in grads]
        return Fused(OPS["lamb_update"], (*masters, *grads, *m, *v, *steps, *self._hypers(group)),
                     self._attrs(params, group), masters + m + v + steps)
