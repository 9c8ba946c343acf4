"""AdamW (MegEngine's `megengine.optimizer.adamw`): Adam with decoupled weight decay."""

from __future__ import annotations

from .adam import Adam
from .optimizer import Params


class AdamW(Adam):
    """Adam with decoupled weight decay: p -= lr * weight_decay * p before the Adam step."""

    _decoupled = True

    def __init__(self, params: Params, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay)


__all__ = ["AdamW"]
