"""Optimizers, as `import eager.optimizer as optim`: the update rules, gradient clipping and
the LR schedulers (also importable from `optim.lr_scheduler`, as in PyTorch)."""

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamw import AdamW
from .clip_grad import clip_grad_norm, clip_grad_norm_, clip_grad_value, clip_grad_value_
from .lamb import LAMB, LAMBFp16
from .lr_scheduler import (
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LinearWarmup,
    LRScheduler,
    OneCycleLR,
    StepLR,
)
from .multi_step_lr import MultiStepLR
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "LAMB", "LAMBFp16",
           "clip_grad_norm", "clip_grad_norm_", "clip_grad_value", "clip_grad_value_",
           "lr_scheduler", "LRScheduler", "StepLR", "MultiStepLR", "CosineAnnealingLR",
           "LambdaLR", "ExponentialLR", "LinearLR", "LinearWarmup", "OneCycleLR"]
