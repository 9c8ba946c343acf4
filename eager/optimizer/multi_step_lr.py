"""MegEngine's `megengine.optimizer.multi_step_lr`: `MultiStepLR`, defined with the other
schedules in `lr_scheduler` (where PyTorch users look for it)."""

from .lr_scheduler import MultiStepLR

__all__ = ["MultiStepLR"]
