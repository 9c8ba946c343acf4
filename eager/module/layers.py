"""Layers with parameters: Linear, convolutions, normalization, Embedding, attention."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from .. import distributed as dist
from .. import functional as F
from ..context import atomic
from ..creation import ones, zeros
from ..errors import OpArgumentError
from ..ops import OPS
from ..tensors import Parameter, Tensor, apply, read, rebind
from . import init
from .module import Module

Ints = int | Sequence[int]  # a size of every spatial axis, or one per axis


def _tuple(v: Ints, n: int) -> tuple[int, ...]:
    return (int(v),) * n if isinstance(v, (int, np.integer)) else tuple(int(i) for i in v)


def _param(shape: Sequence[int], fan_in: int) -> Parameter:
    p = Parameter(zeros(shape))
    init.fan_in_uniform_(p, fan_in)
    return p


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features), PyTorch-default init."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = _param((out_features, in_features), in_features)
        self.bias = _param((out_features,), in_features) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def _extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    _n = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: channels {in_channels} -> {out_channels} "
                             f"are not divisible by groups={groups}")
        n = self._n
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _tuple(kernel_size, n), _tuple(stride, n)
        self.padding, self.dilation = _tuple(padding, n), _tuple(dilation, n)
        shape, fan_in = self._weight_shape()
        self.weight = _param(shape, fan_in)
        self.bias = _param((out_channels,), fan_in) if bias else None

    def _weight_shape(self) -> tuple[tuple[int, ...], int]:
        cin_g = self.in_channels // self.groups
        return (self.out_channels, cin_g, *self.kernel_size), cin_g * math.prod(self.kernel_size)

    def _extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


class Conv1d(_ConvNd):
    """1-d convolution over (N, C, L); weight (out, in/groups, k)."""

    _n = 1

    def forward(self, x: Tensor) -> Tensor:
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


_PADDING_MODES = ("zeros", "reflect", "replicate")


class Conv2d(_ConvNd):
    """2-d convolution over NCHW; weight (out, in/groups, kh, kw).

    `padding_mode` fills the `padding` border with zeros, the mirror image of the edge rows
    ("reflect", the edge itself not repeated) or copies of the edge ("replicate"), as `F.pad`.
    `conv_mode` and `compute_mode` are `F.conv2d`'s.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, dilation: Ints = 1, groups: int = 1, bias: bool = True,
                 conv_mode: str = "cross_correlation", compute_mode: str = "default",
                 padding_mode: str = "zeros"):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias)
        self.conv_mode, self.compute_mode = conv_mode, compute_mode
        self.padding_mode = _padding_mode(padding_mode)

    def forward(self, x: Tensor) -> Tensor:
        padding = self.padding
        if _padding_mode(self.padding_mode) != "zeros":
            (ph, pw), padding = padding, (0, 0)
            x = F.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), self.padding_mode)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation,
                        self.groups, self.conv_mode, self.compute_mode)


def _padding_mode(mode: str) -> str:
    if mode not in _PADDING_MODES:
        raise OpArgumentError(f"Conv2d: padding_mode must be one of {_PADDING_MODES}, got "
                              f"{mode!r}")
    return mode


class ConvTranspose2d(_ConvNd):
    """Transposed 2-d convolution over NCHW; weight (in, out/groups, kh, kw)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Ints, stride: Ints = 1,
                 padding: Ints = 0, output_padding: Ints = 0, dilation: Ints = 1, groups: int = 1,
                 bias: bool = True):
        self.output_padding = _tuple(output_padding, 2)
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias)

    def _weight_shape(self) -> tuple[tuple[int, ...], int]:
        cout_g = self.out_channels // self.groups
        return (self.in_channels, cout_g, *self.kernel_size), cout_g * math.prod(self.kernel_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.dilation, self.groups)


class _BatchNorm(Module):
    """Batch normalization over axis 1.

    Statistics are kept and computed in float32; float16 and bfloat16 inputs are normalized in
    float32 and come back in their own dtype. `track_running_stats` is read at each call, so
    turning it off later means: batch statistics in training and in eval, and no update of the
    running statistics (MegEngine; PyTorch would still use existing buffers in eval). The
    running statistics and the affine parameters have shape (C,), and `state_dict()` gives them
    so; MegEngine's (1, C, 1, 1) load as well (`Module.load_state_dict`).

    With `freeze=True` (MegEngine's; read at each call) it normalizes with the running
    statistics in training too, never updates them, and passes no gradient to `weight` and
    `bias`; the input still gets its gradient.
    """

    _ndims: tuple[int, ...] = (4,)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.9,
                 affine: bool = True, track_running_stats: bool = True, freeze: bool = False):
        super().__init__()
        if freeze and not track_running_stats:
            raise OpArgumentError(f"{type(self).__name__}: freeze=True normalizes with the "
                                  "running statistics, so it needs track_running_stats=True")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats, self.freeze = affine, track_running_stats, freeze
        self.weight = Parameter(ones(num_features)) if affine else None
        self.bias = Parameter(zeros(num_features)) if affine else None
        self.running_mean = zeros(num_features) if track_running_stats else None
        self.running_var = ones(num_features) if track_running_stats else None

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self._ndims:
            dims = " or ".join(map(str, self._ndims))
            raise OpArgumentError(f"{type(self).__name__} expects a {dims}-d input, got shape "
                                  f"{x.shape}")
        dtype = np.dtype(x.dtype)
        low = jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4
        x = x.astype(np.float32) if low else x
        y = self._frozen(x) if self.freeze else self._normalize(x)
        return y.astype(dtype) if low else y

    def _frozen(self, x: Tensor) -> Tensor:
        """`freeze`: the running statistics, and the affine parameters as constants."""
        weight, bias = (None if p is None else p.detach() for p in (self.weight, self.bias))
        return F.batch_norm(x, self.running_mean, self.running_var, weight, bias,
                            training=False, eps=self.eps)

    def _tracking(self) -> bool:
        """Whether this call uses and updates running statistics: the flag as it is now. A
        module built without them has no buffers to track them in (MegEngine refuses too)."""
        if not self.track_running_stats:
            return False
        if self.running_mean is None or self.running_var is None:
            raise OpArgumentError(
                f"{type(self).__name__} was built with track_running_stats=False, so it has no "
                "running statistics to track; build it with track_running_stats=True (or set "
                "running_mean and running_var first)")
        return True

    def _normalize(self, x: Tensor) -> Tensor:
        track = self._tracking()
        return F.batch_norm(
            x, self.running_mean if track else None, self.running_var if track else None,
            self.weight, self.bias, training=self.training or not track,
            momentum=self.momentum, eps=self.eps,
        )

    def _extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class BatchNorm1d(_BatchNorm):
    """BatchNorm over (N, C) or (N, C, L); MegEngine momentum, as BatchNorm2d."""

    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """BatchNorm over NCHW; MegEngine momentum (running = m*running + (1-m)*batch)."""


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose batch statistics cover the batches of every rank of the process group
    (MegEngine's `SyncBatchNorm`): the same as `BatchNorm2d` on the whole batch, with running
    statistics identical on every rank. Over (N, C), (N, C, L) or (N, C, H, W).

    A batch sharded over a mesh (`dist.shard_batch`) needs nothing more: its statistics are over
    the global batch already, as for any BatchNorm.
    """

    _ndims = (2, 3, 4)

    def _normalize(self, x: Tensor) -> Tensor:
        world, track = dist.get_world_size(), self._tracking()
        if world == 1 or not (self.training or not track):
            return super()._normalize(x)
        axes = (0, *range(2, x.ndim))
        count = (x.size // x.shape[1]) * world
        channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        mean = dist.functional.all_reduce_sum(x.sum(axis=axes)) / count
        centered = x - mean.reshape(channel)
        var = dist.functional.all_reduce_sum((centered * centered).sum(axis=axes)) / count
        y = centered * F.rsqrt(var + self.eps).reshape(channel)
        if self.weight is not None:
            y = y * self.weight.reshape(channel)
        if self.bias is not None:
            y = y + self.bias.reshape(channel)
        if track and self.training:
            assert self.running_mean is not None and self.running_var is not None  # _tracking()
            new_mean, new_var = apply(OPS["running_stats_update"], self.running_mean,
                                      self.running_var, mean, var * (count / max(count - 1, 1)),
                                      momentum=float(self.momentum))
            with atomic():  # both statistics, or (a signal before) neither
                rebind(self.running_mean, read(new_mean))
                rebind(self.running_var, read(new_var))
        return y


class LayerNorm(Module):
    """Normalization over the trailing `normalized_shape` axes, with weight and bias."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 affine: bool = True):
        super().__init__()
        self.normalized_shape = _tuple(normalized_shape, 1)
        self.eps, self.affine = eps, affine
        self.weight = Parameter(ones(self.normalized_shape)) if affine else None
        self.bias = Parameter(zeros(self.normalized_shape)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.affine, self.weight, self.bias, self.eps)


class GroupNorm(Module):
    """Normalization over groups of channels of an (N, C, ...) input."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups, num_channels, eps, affine)
        self.weight = Parameter(ones(num_channels)) if affine else None
        self.bias = Parameter(zeros(num_channels)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.affine, self.weight, self.bias, self.eps)


class Embedding(Module):
    """A lookup table of `num_embeddings` vectors of size `embedding_dim`, initialized N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(zeros((num_embeddings, embedding_dim)))
        init.normal_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.embedding(x, self.weight)


class MultiHeadAttention(Module):
    """Multi-head attention with PyTorch's parameter names (`in_proj_weight`, `out_proj`).

    Inputs are (L, N, E), or (N, L, E) with `batch_first=True`. Returns `(output, None)`, as
    PyTorch and MegEngine do with `need_weights=False`.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first = batch_first
        self.in_proj_weight = _param((3 * embed_dim, embed_dim), embed_dim)
        self.in_proj_bias = Parameter(zeros(3 * embed_dim)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> tuple[Tensor, None]:
        key = query if key is None else key
        value = key if value is None else value
        if not self.batch_first:
            query, key, value = (t.transpose(1, 0, 2) for t in (query, key, value))
        w = F.split(self.in_proj_weight, 3)
        b = F.split(self.in_proj_bias, 3) if self.in_proj_bias is not None else [None] * 3
        q, k, v = (self._heads(F.linear(t, wi, bi)) for t, wi, bi in zip((query, key, value), w, b))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask, self.dropout, is_causal,
                                           training=self.training)
        n, h, length, d = o.shape
        out = self.out_proj(o.transpose(0, 2, 1, 3).reshape(n, length, h * d))
        return (out if self.batch_first else out.transpose(1, 0, 2)), None

    def _heads(self, t: Tensor) -> Tensor:
        n, length, e = t.shape
        return t.reshape(n, length, self.num_heads, e // self.num_heads).transpose(0, 2, 1, 3)
