"""`Embedding`: a lookup table of vectors (MegEngine's `megengine.module.embedding`)."""

from __future__ import annotations

from .. import functional as F
from ..core.creation import zeros
from ..core.tensors import Parameter, Tensor
from . import init
from .module import Module


class Embedding(Module):
    """A lookup table of `num_embeddings` vectors of size `embedding_dim`, initialized N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(zeros((num_embeddings, embedding_dim)))
        init.normal_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.embedding(x, self.weight)
