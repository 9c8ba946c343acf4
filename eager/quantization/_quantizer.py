"""`Quantizer`: what observers and fake quantizers share, the quantized dtype they aim at (its
grid [qmin, qmax]) and the switch that turns them off."""

from __future__ import annotations

from typing import Any

from ..core.quant_dtype import QuantDtypeMeta
from ..module.module import Module
from .utils import get_dtype_meta


class Quantizer(Module):
    """A Module aiming at quantized dtype `dtype` (a name such as "qint8", or a meta), on while
    `enabled`. MegEngine's `narrow_range` is taken and ignored, as there: the dtype says it."""

    def __init__(self, dtype: str | QuantDtypeMeta, enable: bool = True, **kwargs: Any):
        super().__init__()
        kwargs.pop("narrow_range", None)
        meta = get_dtype_meta(dtype)
        assert meta is not None
        self.dtype = meta
        self.qmin = meta.qmin
        self.qmax = meta.qmax
        self.enabled = enable

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False
