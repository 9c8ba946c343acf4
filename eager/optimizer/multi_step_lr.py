"""`MultiStepLR` (MegEngine's `megengine.optimizer.multi_step_lr`): the learning rate multiplied
by `gamma` at each milestone epoch."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .lr_scheduler import LRScheduler
from .optimizer import Optimizer


class MultiStepLR(LRScheduler):
    """lr = base * gamma ** (number of milestones <= epoch)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1,
                 current_epoch: int | None = None):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


__all__ = ["MultiStepLR"]
