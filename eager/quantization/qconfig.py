"""`QConfig` and the shipped configurations (MegEngine's `megengine.quantization.qconfig`): which
observer and fake quantizer a QAT module makes for its weight and for its activation.

Weights use `qint8_narrow` ([-127, 127]) so that a sum of two products of extremes cannot
overflow int16; activations use the full `qint8`.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

from ..core.errors import OpTypeError
from ..module.module import Module
from .fake_quant import TQT, FakeQuantize
from .observer import (
    ExponentialMovingAverageObserver,
    HistogramObserver,
    MinMaxObserver,
    PassiveObserver,
    SyncExponentialMovingAverageObserver,
    SyncMinMaxObserver,
)

__all__ = ["QConfig", "min_max_fakequant_qconfig", "ema_fakequant_qconfig",
           "sync_ema_fakequant_qconfig", "ema_lowbit_fakequant_qconfig", "calibration_qconfig",
           "tqt_qconfig", "passive_qconfig", "easyquant_qconfig"]


class _Fields(NamedTuple):
    weight_observer: Any
    act_observer: Any
    weight_fake_quant: Any
    act_fake_quant: Any


class QConfig(_Fields):
    """How a QAT module quantizes: four factories (classes, or `functools.partial`s of them,
    or None), called to make the weight's and the activation's observer and fake quantizer.
    Immutable and comparable, like MegEngine's."""

    def __new__(cls, weight_observer: Any, act_observer: Any, weight_fake_quant: Any,
                act_fake_quant: Any) -> QConfig:
        if isinstance(act_observer, Module) or isinstance(weight_observer, Module):
            raise OpTypeError("QConfig takes observer factories, not observer instances: pass "
                              "partial(MyObserver, ...) so that each module gets its own.")
        return super().__new__(cls, weight_observer, act_observer, weight_fake_quant,
                               act_fake_quant)


def _config(weight_observer: Any, act_observer: Any, weight_fq: Any = FakeQuantize,
            act_fq: Any = FakeQuantize, weight: str = "qint8_narrow",
            act: str = "qint8") -> QConfig:
    return QConfig(
        weight_observer=weight_observer and partial(weight_observer, dtype=weight),
        act_observer=act_observer and partial(act_observer, dtype=act),
        weight_fake_quant=weight_fq and partial(weight_fq, dtype=weight),
        act_fake_quant=act_fq and partial(act_fq, dtype=act))


min_max_fakequant_qconfig = _config(MinMaxObserver, MinMaxObserver)
ema_fakequant_qconfig = _config(MinMaxObserver, ExponentialMovingAverageObserver)
sync_ema_fakequant_qconfig = _config(SyncMinMaxObserver, SyncExponentialMovingAverageObserver)
ema_lowbit_fakequant_qconfig = _config(MinMaxObserver, ExponentialMovingAverageObserver,
                                       weight="qint4", act="qint4")
calibration_qconfig = _config(MinMaxObserver, HistogramObserver, None, None)
tqt_qconfig = _config(None, None, TQT, TQT)
passive_qconfig = _config(PassiveObserver, PassiveObserver)
easyquant_qconfig = passive_qconfig
