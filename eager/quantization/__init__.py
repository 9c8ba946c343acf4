"""Quantization-aware training (MegEngine's `megengine.quantization`): observers, fake quantizers,
their configurations and the quantized dtypes' parameters.

>>> import eager as eg
>>> obs = MinMaxObserver(dtype="qint8")
>>> _ = obs(eg.tensor([-1.0, 0.5, 2.55]))
>>> round(obs.get_qparams().scale.item(), 4)
0.02
"""

from .fake_quant import LSQ, TQT, FakeQuantize
from .observer import (
    ExponentialMovingAverageObserver,
    HistogramObserver,
    MinMaxObserver,
    Observer,
    PassiveObserver,
    SyncExponentialMovingAverageObserver,
    SyncMinMaxObserver,
)
from .qconfig import (
    QConfig,
    calibration_qconfig,
    easyquant_qconfig,
    ema_fakequant_qconfig,
    ema_lowbit_fakequant_qconfig,
    min_max_fakequant_qconfig,
    passive_qconfig,
    sync_ema_fakequant_qconfig,
    tqt_qconfig,
)
from .quantize import (
    apply_easy_quant,
    disable_fake_quant,
    disable_observer,
    enable_fake_quant,
    enable_observer,
    propagate_qconfig,
    quantize,
    quantize_qat,
    reset_qconfig,
)
from .utils import QParams, QuantMode, create_qparams, fake_quant_bias, fake_quant_tensor

__all__ = ["LSQ", "TQT", "FakeQuantize", "ExponentialMovingAverageObserver", "HistogramObserver",
           "MinMaxObserver", "Observer", "PassiveObserver", "SyncExponentialMovingAverageObserver",
           "SyncMinMaxObserver", "QConfig", "calibration_qconfig", "easyquant_qconfig",
           "ema_fakequant_qconfig", "ema_lowbit_fakequant_qconfig", "min_max_fakequant_qconfig",
           "passive_qconfig", "sync_ema_fakequant_qconfig", "tqt_qconfig", "QParams",
           "QuantMode", "create_qparams", "fake_quant_bias", "fake_quant_tensor",
           "quantize_qat", "quantize", "reset_qconfig", "propagate_qconfig", "enable_fake_quant",
           "disable_fake_quant", "enable_observer", "disable_observer", "apply_easy_quant"]
