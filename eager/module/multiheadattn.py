"""`MultiHeadAttention` (MegEngine's `megengine.module.multiheadattn`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import functional as F
from ..core.creation import zeros
from ..core.tensors import Parameter, Tensor
from ..serialization import layouts
from ._params import _param
from .linear import Linear
from .module import Module


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

    def _load_layouts(self, state: dict[str, Any], prefix: str) -> None:
        """MegEngine's `io_weight_bias` (1, 4E*E [+ 4E]): the query, key, value and output
        projections, each stored (in, out), so transposed, then their four biases."""
        super()._load_layouts(state, prefix)
        if f"{prefix}io_weight_bias" not in state:
            return
        packed = layouts.array(state.pop(f"{prefix}io_weight_bias")).reshape(-1)
        e, bias = self.embed_dim, self.in_proj_bias is not None
        shapes: list[tuple[str, tuple[int, ...]]] = [(n, (e, e)) for n in ("q", "k", "v", "o")]
        shapes += [(f"b{n}", (e,)) for n in ("q", "k", "v", "o")] if bias else []
        got = dict(layouts.pieces(packed, shapes, f"{prefix}io_weight_bias"))
        state[f"{prefix}in_proj_weight"] = np.concatenate([got[k].T for k in "qkv"])
        state[f"{prefix}out_proj.weight"] = got["o"].T
        if bias:
            state[f"{prefix}in_proj_bias"] = np.concatenate([got[f"b{k}"] for k in "qkv"])
            state[f"{prefix}out_proj.bias"] = got["bo"]

    def _heads(self, t: Tensor) -> Tensor:
        n, length, e = t.shape
        return t.reshape(n, length, self.num_heads, e // self.num_heads).transpose(0, 2, 1, 3)
