"""Modules, as `import eager.module as M`."""

from . import init
from .container import ModuleList, Sequential
from .layers import (
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    SyncBatchNorm,
)
from .module import Module
from .simple import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    Dropout,
    Flatten,
    Identity,
    MaxPool2d,
    ReLU,
    Sigmoid,
    SiLU,
    Tanh,
)

__all__ = [
    "init", "Module", "Sequential", "ModuleList", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d",
    "BatchNorm1d", "BatchNorm2d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "Embedding",
    "MultiHeadAttention", "Dropout", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Identity",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten",
]
