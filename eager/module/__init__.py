"""Modules, as `import eager.module as M`."""

from . import init
from .activation import ELU, Hardswish, LeakyReLU, PReLU, ReLU6, Softmax
from .container import ModuleDict, ModuleList, Sequential
from .fused import ConvBn2d, ConvBnRelu2d, ConvRelu2d
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
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .simple import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    Dropout,
    Dropout2d,
    Flatten,
    Identity,
    MaxPool2d,
    ReLU,
    Sigmoid,
    SiLU,
    Tanh,
    Upsample,
)
from .vision import (
    AdaptiveMaxPool2d,
    Conv3d,
    InstanceNorm,
    LocalResponseNorm,
    Pad,
    PixelShuffle,
)

__all__ = [
    "init", "Module", "Sequential", "ModuleList", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d",
    "BatchNorm1d", "BatchNorm2d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "Embedding",
    "MultiHeadAttention", "Dropout", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Identity",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "ModuleDict", "LeakyReLU", "PReLU",
    "ELU", "Softmax", "ReLU6", "Hardswish", "Dropout2d", "Upsample", "RNNCell", "LSTMCell",
    "GRUCell", "RNN", "LSTM", "GRU",
    "InstanceNorm", "AdaptiveMaxPool2d", "Pad", "PixelShuffle", "LocalResponseNorm", "Conv3d",
    "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d",
]
