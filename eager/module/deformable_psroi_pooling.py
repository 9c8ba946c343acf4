"""`DeformablePSROIPooling` (MegEngine's `megengine.module.deformable_psroi_pooling`)."""

from __future__ import annotations

from typing import Any

from .. import functional as F
from ..core.tensors import Tensor
from .module import Module


class DeformablePSROIPooling(Module):
    """Deformable PS RoI pooling (`F.deformable_psroi_pooling`) with its settings fixed:
    `forward(inp, rois, trans)`. It has no parameters; the offsets `trans` come from the
    caller (in Deformable R-FCN, a first pass with `no_trans=True` and a fully connected
    layer)."""

    def __init__(self, no_trans: bool, part_size: int, pooled_h: int, pooled_w: int,
                 sample_per_part: int, spatial_scale: float, trans_std: float = 0.1):
        super().__init__()
        self.no_trans, self.part_size = no_trans, part_size
        self.pooled_h, self.pooled_w = pooled_h, pooled_w
        self.sample_per_part, self.spatial_scale = sample_per_part, spatial_scale
        self.trans_std = trans_std

    def forward(self, inp: Any, rois: Any, trans: Any) -> Tensor:
        return F.deformable_psroi_pooling(inp, rois, trans, self.no_trans, self.part_size,
                                          self.pooled_h, self.pooled_w, self.sample_per_part,
                                          self.spatial_scale, self.trans_std)

    def _extra_repr(self) -> str:
        return (f"no_trans={self.no_trans}, part_size={self.part_size}, pooled_h="
                f"{self.pooled_h}, pooled_w={self.pooled_w}, sample_per_part="
                f"{self.sample_per_part}, spatial_scale={self.spatial_scale}, trans_std="
                f"{self.trans_std}")
