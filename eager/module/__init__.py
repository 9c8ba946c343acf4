"""Modules, as `import eager.module as M`, laid out as MegEngine's `megengine.module`: each
file is MegEngine's of the same name (`conv.py`, `batchnorm.py`, `normalization.py`, ...), so
`from eager.module.normalization import GroupNorm` works as MegEngine code writes it."""

from . import init
from .activation import (
    ELU,
    GELU,
    Hardswish,
    LeakyReLU,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from .adaptive_pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d
from .batch_matmul_activation import BatchMatMulActivation
from .batchnorm import BatchNorm1d, BatchNorm2d, SyncBatchNorm
from .concat import Concat
from .container import ModuleDict, ModuleList
from .conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvRelu2d,
    ConvTranspose2d,
    ConvTranspose3d,
    ConvTransposeRelu2d,
    DeformableConv2d,
)
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d
from .deformable_psroi_pooling import DeformablePSROIPooling
from .dropout import Dropout, Dropout2d
from .elemwise import Elemwise
from .embedding import Embedding
from .identity import Identity
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .lrn import LocalResponseNorm
from .module import Module
from .multiheadattn import MultiHeadAttention
from .normalization import GroupNorm, InstanceNorm, LayerNorm
from .padding import Pad
from .pixel_shuffle import PixelShuffle
from .pooling import AvgPool2d, MaxPool2d
from .quant_dequant import DequantStub, QuantStub
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .sequential import Sequential
from .shape_layers import Flatten, Upsample
from .sliding_window import SlidingWindow, SlidingWindowTranspose

__all__ = [
    "init", "Module", "Sequential", "ModuleList", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d",
    "BatchNorm1d", "BatchNorm2d", "SyncBatchNorm", "LayerNorm", "GroupNorm", "Embedding",
    "MultiHeadAttention", "Dropout", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "Identity",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "ModuleDict", "LeakyReLU", "PReLU",
    "ELU", "Softmax", "ReLU6", "Hardswish", "Dropout2d", "Upsample", "RNNCell", "LSTMCell",
    "GRUCell", "RNN", "LSTM", "GRU",
    "InstanceNorm", "AdaptiveMaxPool2d", "Pad", "PixelShuffle", "LocalResponseNorm", "Conv3d",
    "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d", "ConvTranspose3d", "SlidingWindow",
    "SlidingWindowTranspose", "DeformableConv2d", "DeformablePSROIPooling",
    # the modules MegEngine provides for quantization (`eager.module.qat` holds their QAT forms)
    "QuantStub", "DequantStub", "Elemwise", "Concat", "BatchMatMulActivation", "LinearRelu",
    "LinearBn1d", "LinearBnRelu1d", "ConvTransposeRelu2d", "ConvTransposeBn2d",
    "ConvTransposeBnRelu2d",
]
