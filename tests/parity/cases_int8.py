"""Parity cases for int8 inference: quantized tensors (`astype` to and between quantized dtypes),
`F.quantized.conv_bias_activation` (dense and grouped, strided, padded, identity and relu),
`F.avg_pool2d` and `F.max_pool2d` on qint8, the quantized Elemwise modes, and a small conv /
linear model through `quantize_qat`, calibration and `quantize`, its int8 outputs compared.

The int8 results are the integer storage, compared exactly (atol 0) except where stated:
MegEngine's CPU kernels and this project's agree bit for bit on every case here (measured on
MegEngine 1.13, x86 CPU). The model case returns its dequantized output and the scale.
"""

from __future__ import annotations

import numpy as np
from parity_cases import case, data, set_weights


def _ints(shape: tuple, seed: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    return np.random.RandomState(seed).randint(lo, hi + 1, shape).astype("int8")


def _storage(t: object) -> np.ndarray:
    a = t.numpy()  # type: ignore[attr-defined]
    return a.view(np.dtype(a.dtype.str)).astype("int64")


def _qtensor(values: np.ndarray, dtype: object) -> object:
    import megengine as mge

    return mge.tensor(values.view(dtype))


@case(rtol=0, atol=0)
def int8_astype_rounds_and_saturates() -> dict:
    import megengine as mge
    from megengine.core.tensor.dtype import qint8, qint32, quint8

    x = np.concatenate([data(40, seed=1) * 50,
                        np.float32(0.37) * np.float32([0.5, -0.5, 1.5, -2.5, 300, -300])])
    t = mge.tensor(x.astype("float32"))
    q = t.astype(qint8(0.37))
    return {"qint8": _storage(q), "quint8": _storage(t.astype(quint8(0.2, 120))),
            "qint32": _storage(t.astype(qint32(0.001))),
            "requantized": _storage(q.astype(qint8(0.61))),
            "dequantized": q.astype("float32").numpy()}


def _conv_case(groups: int, stride: int, padding: int, mode: str, seed: int) -> dict:
    import megengine.functional as F
    from megengine.core.tensor.dtype import qint8, qint32

    cin, cout = 4 * groups, 3 * groups
    x = _ints((2, cin, 9, 8), seed)
    w = _ints((cout, cin // groups, 3, 3), seed + 1, -127, 127)
    if groups > 1:
        w = w.reshape(groups, cout // groups, cin // groups, 3, 3)
    b = np.random.RandomState(seed + 2).randint(-4000, 4000, (1, cout, 1, 1)).astype("int32")
    si, sw, so = 0.043, 0.0071, 0.15
    y = F.quantized.conv_bias_activation(
        _qtensor(x, qint8(si)), _qtensor(w, qint8(sw)),
        _qtensor(b, qint32(float(np.float32(si) * np.float32(sw)))), qint8(so),
        stride=stride, padding=padding, groups=groups, nonlinear_mode=mode)
    return {"y": _storage(y)}


@case(rtol=0, atol=0)
def int8_conv_bias_activation_dense() -> dict:
    return _conv_case(groups=1, stride=1, padding=1, mode="identity", seed=3)


@case(rtol=0, atol=0)
def int8_conv_bias_activation_strided_relu() -> dict:
    return _conv_case(groups=1, stride=2, padding=0, mode="relu", seed=7)


@case(rtol=0, atol=0)
def int8_conv_bias_activation_grouped() -> dict:
    return _conv_case(groups=2, stride=1, padding=1, mode="relu", seed=11)


@case(rtol=0, atol=0)
def int8_conv_requantization_ties() -> dict:
    """Every product of an int8 input and weight, requantized under scales where some land
    within an ulp of a half (found among 300 random ones: the accumulator times the single
    multiplier acc_scale / out_scale rounds them the other way from MegEngine)."""
    import megengine as mge
    import megengine.functional as F
    from megengine.core.tensor.dtype import qint8, qint32

    x = np.arange(-128, 128).astype("int8").reshape(1, 1, 16, 16)
    w = np.arange(-127, 128).astype("int8").reshape(255, 1, 1, 1)
    scales = [(1.6421654224395752, 0.1951054483652115, 36.074378967285156),
              (1.6574851274490356, 1.8500088453292847, 129.36996459960938)]
    out = {}
    for i, (si, sw, so) in enumerate(scales):
        acc = float(np.float32(si) * np.float32(sw))
        y = F.quantized.conv_bias_activation(
            mge.tensor(x.view(qint8(si))), mge.tensor(w.view(qint8(sw))),
            mge.tensor(np.zeros((1, 255, 1, 1), "int32").view(qint32(acc))), qint8(so))
        out[f"y{i}"] = _storage(y)
    return out


@case(rtol=0, atol=0)
def int8_pooling() -> dict:
    import megengine as mge
    import megengine.functional as F
    from megengine.core.tensor.dtype import qint8

    q = mge.tensor(data(2, 3, 8, 8, seed=5) * 3).astype(qint8(0.05))
    return {"avg": _storage(F.avg_pool2d(q, 2)), "avg3": _storage(F.avg_pool2d(q, 3, 2)),
            "max": _storage(F.max_pool2d(q, 3, 2, 1))}


@case(rtol=0, atol=0)
def int8_elemwise_modes() -> dict:
    import megengine as mge
    import megengine.module.quantized as QM
    from megengine.core.tensor.dtype import qint8

    a = mge.tensor(data(3, 17, seed=2)).astype(qint8(0.02))
    b = mge.tensor(data(3, 17, seed=3) * 2).astype(qint8(0.03))
    out = {}
    for mode in ("ADD", "FUSE_ADD_RELU", "MUL", "SUB", "MAX"):
        m = QM.Elemwise(mode, dtype=qint8(0.04))
        m.eval()
        out[mode] = _storage(m(a, b))
    return out


def _model() -> object:
    import megengine.functional as F
    import megengine.module as M

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.quant, self.dequant = M.QuantStub(), M.DequantStub()
            self.c1 = M.ConvBnRelu2d(3, 8, 3, padding=1)
            self.c2 = M.ConvBn2d(8, 8, 3, padding=1, groups=2)
            self.add = M.Elemwise("FUSE_ADD_RELU")
            self.fc = M.LinearRelu(8 * 4 * 4, 10)

        def forward(self, x: object) -> object:
            y = self.c1(self.quant(x))
            x = self.add(self.c2(y), y)
            x = F.flatten(F.max_pool2d(x, 2), 1)
            return self.dequant(self.fc(x))

    return Net()


@case(rtol=0, atol=0)
def int8_quantized_conv_linear_model() -> dict:
    import megengine as mge
    from megengine.quantization import min_max_fakequant_qconfig, quantize, quantize_qat

    net = _model()
    set_weights(net, seed=21)
    quantize_qat(net, qconfig=min_max_fakequant_qconfig)
    x = mge.tensor(data(4, 3, 8, 8, seed=22))
    net.train()
    net(x)  # calibrates the observers and the BatchNorm statistics
    net.eval()
    qat = net(x).numpy()
    quantize(net)
    net.eval()
    scale = float(net.fc.output_dtype.metadata["mgb_dtype"]["scale"])
    y = net(x).numpy()
    return {"int8_steps": np.round(y / np.float32(scale)).astype("int64"),
            "qat_steps": np.round(qat / np.float32(scale)).astype("int64")}
