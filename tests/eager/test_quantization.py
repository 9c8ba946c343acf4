"""`eager.quantization` run eagerly: observers' statistics and qparams after several batches
against numpy written from MegEngine 1.13's formulas, enable/disable and train/eval, the fake
quantizers' parameters (TQT's log2 scale, LSQ's step size) and their gradients, the bias's
fake quantization, `Tensor.qparams`, the shipped qconfigs and the quantized dtypes. The same
numbers measured in MegEngine are the parity cases in `tests/parity/cases_quantization.py`;
compiled runs are in `tests/partial/test_quantization.py`.
"""

import copy

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.quantization as Q
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError, OpTypeError
from eager.quantization import dtype as qd
from eager.quantization.utils import QParamsModuleMixin
from tests.helpers import examples

F32 = np.float32


def _batches(n, seed, shape=(4, 5)):
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 + i, shape) + rng.normal(0, 1)).astype(F32) for i in range(n)]


def _round(v):
    return np.trunc(v + np.copysign(0.5, v))


def _qparams_ref(lo, hi, qmin, qmax, mode, eps=1e-5):
    lo, hi = min(0.0, lo), max(0.0, hi)
    if mode == Q.QuantMode.SYMMERTIC:
        return max(max(-lo, hi) / ((qmax - qmin) / 2), eps), None
    scale = max((hi - lo) / (qmax - qmin), eps)
    return scale, qmin - _round(lo / scale)


@examples(4)
@given(st.integers(1, 4), st.integers(0, 99), st.sampled_from(["qint8", "quint8", "qint4"]),
       st.sampled_from(list(Q.QuantMode)))
def test_min_max_observer(steps, seed, dtype, mode):
    obs = Q.MinMaxObserver(mode=mode, dtype=dtype)
    batches = _batches(steps, seed)
    for b in batches:
        out = obs(eg.tensor(b))
        np.testing.assert_array_equal(out.numpy(), b)
    lo, hi = min(b.min() for b in batches), max(b.max() for b in batches)
    assert obs.min_val.numpy() == lo and obs.max_val.numpy() == hi
    meta = obs.dtype
    scale, zp = _qparams_ref(float(lo), float(hi), meta.qmin, meta.qmax, mode)
    qp = obs.get_qparams()
    assert qp.mode == mode and qp.dtype_meta is meta
    np.testing.assert_allclose(qp.scale.numpy(), scale, rtol=1e-6)
    if zp is None:
        assert qp.zero_point is None
    else:
        np.testing.assert_allclose(qp.zero_point.numpy(), zp)


@examples(4)
@given(st.integers(1, 4), st.integers(0, 99), st.floats(0.0, 0.99))
def test_ema_observer(steps, seed, momentum):
    obs = Q.ExponentialMovingAverageObserver(momentum=momentum)
    lo = hi = None
    for b in _batches(steps, seed):
        obs(eg.tensor(b))
        m = F32(momentum)
        lo = b.min() if lo is None else lo * m + (1 - m) * b.min()
        hi = b.max() if hi is None else hi * m + (1 - m) * b.max()
    np.testing.assert_allclose(obs.min_val.numpy(), lo, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(obs.max_val.numpy(), hi, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(obs.runtime_momentum.numpy(), m)
    # MegEngine's state names, so that its checkpoints load
    assert sorted(obs.state_dict()) == ["max_val", "min_val", "momentum", "runtime_momentum"]


def test_sync_observers_on_one_process_are_the_plain_ones():
    for plain, sync in [(Q.MinMaxObserver(), Q.SyncMinMaxObserver()),
                        (Q.ExponentialMovingAverageObserver(),
                         Q.SyncExponentialMovingAverageObserver())]:
        for b in _batches(3, 7):
            plain(eg.tensor(b))
            sync(eg.tensor(b))
        assert plain.min_val.numpy() == sync.min_val.numpy()
        assert plain.max_val.numpy() == sync.max_val.numpy()


def test_disabled_and_eval_observers_keep_their_statistics():
    obs = Q.MinMaxObserver()
    obs(eg.tensor([1.0, -2.0]))
    obs.disable()
    obs(eg.tensor([10.0]))
    assert obs.max_val.numpy() == 1.0
    obs.enable()
    obs.eval()
    assert not obs.enabled
    obs(eg.tensor([10.0]))
    obs.train()
    obs(eg.tensor([5.0]))
    assert obs.enabled and obs.max_val.numpy() == 5.0


def test_histogram_observer():
    obs = Q.HistogramObserver(bins=64, upsample_rate=8)
    batches = _batches(3, 3, (200,))
    for b in batches:
        obs(eg.tensor(b))
    hist = obs.histogram.numpy()
    assert hist.shape == (64,) and abs(hist.sum() - 600) < 1e-3
    assert obs.min_val.numpy() <= min(b.min() for b in batches)
    assert obs.max_val.numpy() >= max(b.max() for b in batches)
    scale = obs.get_qparams().scale.numpy()
    widest = max(-obs.min_val.numpy(), obs.max_val.numpy()) / 127.5
    assert 0 < scale <= widest * (1 + 1e-6)  # outliers may be cut, never widened


def test_passive_observer():
    obs = Q.PassiveObserver(dtype="qint8")
    with pytest.raises(OpArgumentError, match="set_qparams"):
        obs.get_qparams()
    src = Q.create_qparams(Q.QuantMode.SYMMERTIC, None, scale=eg.tensor(0.5))
    obs.set_qparams(src)
    assert obs.get_qparams().dtype_meta is obs.dtype and obs.orig_scale == 0.5
    obs.scale = 0.25
    assert obs.scale.numpy() == 0.25 and src.scale.numpy() == 0.5  # a copy
    with pytest.raises(OpArgumentError, match="positive"):
        obs.scale = -1.0
    with pytest.raises(OpArgumentError, match="not this observer's"):
        obs.set_qparams(Q.create_qparams(dtype_meta="quint8", scale=eg.tensor(1.0)))


def test_fake_quantize_module():
    obs = Q.MinMaxObserver(dtype="qint8")
    fq = Q.FakeQuantize(dtype="qint8")
    x = eg.tensor([0.3, -1.0, 2.54])
    obs(x)
    np.testing.assert_allclose(fq(x, obs.get_qparams()).numpy(), [0.3, -1.0, 2.54], atol=0.01)
    with pytest.raises(OpArgumentError, match="FakeQuantize of qint8"):
        fq(x, Q.MinMaxObserver(dtype="quint8").get_qparams())
    fq.disable()
    assert fq(x, None) is x


def test_tqt_learns_its_log2_scale():
    tqt = Q.TQT("qint8")
    assert isinstance(tqt, QParamsModuleMixin) and tqt.scale.shape == ()
    tqt.set_qparams(Q.create_qparams(scale=eg.tensor(0.25)))
    assert tqt.scale.numpy() == -2.0 and tqt.get_qparams().scale.numpy() == 0.25
    x = eg.tensor([0.3, 40.0, -1.1])
    gm = GradManager().attach([tqt.scale, x])
    with gm:
        y = tqt(x)
        gm.backward(y.sum())
    np.testing.assert_allclose(y.numpy(), [0.25, 31.75, -1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0, 1])
    # (q - v) t ln2 inside, q t ln2 outside (MegEngine's TQT)
    want = ((1 - 1.2) + 127 + (-4 + 4.4)) * 0.25 * np.log(2)
    np.testing.assert_allclose(tqt.scale.grad.numpy(), want, rtol=1e-5)
    with pytest.raises(OpArgumentError, match="symmetrically"):
        tqt.set_qparams(Q.create_qparams(Q.QuantMode.ASYMMERTIC, scale=eg.tensor(1.0)))


def test_lsq_learns_its_step_size():
    lsq = Q.LSQ("qint8")
    lsq.set_qparams(Q.create_qparams(scale=eg.tensor(0.5)))
    np.testing.assert_allclose(lsq.step_size.numpy(), 0.5 - 1e-5)
    np.testing.assert_allclose(lsq.get_qparams().scale.numpy(), 0.5)
    lsq.step_size[...] = eg.tensor(-0.5 + 1e-5)  # |step| + eps: the sign does not matter
    x = eg.tensor([0.3, 100.0])
    gm = GradManager().attach([lsq.step_size, x])
    with gm:
        y = lsq(x)
        gm.backward(y.sum())
    np.testing.assert_allclose(y.numpy(), [0.5, 63.5], rtol=1e-6)
    np.testing.assert_array_equal(x.grad.numpy(), [1, 0])
    # d|s|/ds = -1 for a negative step: -((1 - 0.6) + 127)
    np.testing.assert_allclose(lsq.step_size.grad.numpy(), -(0.4 + 127), rtol=1e-4)
    params = Q.utils.LSQParams(Q.QuantMode.ASYMMERTIC, lsq.dtype, eg.tensor(1e-6),
                               eg.tensor(3.0), eg.tensor(0.1))
    lsq.set_qparams(params)
    assert lsq.step_size.numpy() == 0 and lsq.zero_point.numpy() == 3.0
    assert lsq.grad_scale.numpy() == F32(0.1)


def test_fake_quant_bias_uses_the_product_of_scales():
    inp, w = eg.tensor([1.0]), eg.tensor([1.0])
    inp.qparams.update(Q.create_qparams(dtype_meta="qint8", scale=eg.tensor(0.5)))
    bias = eg.tensor([0.3, 1.0])
    assert Q.fake_quant_bias(bias, inp, w) is bias  # the weight has no scale yet
    w.qparams.update(Q.create_qparams(dtype_meta="qint8_narrow", scale=eg.tensor(0.25)))
    out = Q.fake_quant_bias(bias, inp, w)
    np.testing.assert_allclose(out.numpy(), [0.25, 1.0])  # step 0.125
    assert out.qparams.dtype_meta.name == "qint32"
    assert out.qparams.scale.numpy() == 0.125
    inp.qparams.mode = Q.QuantMode.ASYMMERTIC
    assert Q.fake_quant_bias(bias, inp, w) is bias
    assert Q.fake_quant_bias(None, inp, w) is None


def test_tensor_qparams():
    t = eg.tensor([1.0])
    qp = t.qparams
    assert qp is t.qparams and qp == Q.create_qparams()
    assert qp.scale is None and qp.dtype_meta is None
    qp.update(Q.create_qparams(dtype_meta="qint8", scale=eg.tensor(2.0)))
    kept = copy.deepcopy(t).qparams
    assert kept is not qp and kept.dtype_meta is qp.dtype_meta and kept.scale.numpy() == 2.0
    assert eg.tensor([2.0]).qparams.scale is None  # each tensor its own


def test_qconfigs():
    assert Q.easyquant_qconfig is Q.passive_qconfig
    qc = Q.ema_fakequant_qconfig
    w, a = qc.weight_observer(), qc.act_observer()
    assert w.dtype.name == "qint8_narrow" and isinstance(a, Q.ExponentialMovingAverageObserver)
    assert qc.weight_fake_quant().dtype is w.dtype
    assert Q.ema_lowbit_fakequant_qconfig.act_observer().qmax == 7
    assert Q.calibration_qconfig.act_fake_quant is None
    assert isinstance(Q.calibration_qconfig.act_observer(), Q.HistogramObserver)
    assert Q.tqt_qconfig.weight_observer is None
    assert isinstance(Q.tqt_qconfig.act_fake_quant(), Q.TQT)
    assert isinstance(Q.sync_ema_fakequant_qconfig.weight_observer(), Q.SyncMinMaxObserver)
    with pytest.raises(OpTypeError, match="factories"):
        Q.QConfig(Q.MinMaxObserver(), None, None, None)
    with pytest.raises(OpArgumentError, match="unknown quantized dtype"):
        Q.MinMaxObserver(dtype="qint9")


def test_quantized_dtypes():
    d = qd.quint8(0.1, 128)
    assert d == np.uint8 and qd.get_scale(d) == 0.1 and qd.get_zero_point(d) == 128
    assert d.metadata == {"mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.1,
                                        "zero_point": 128}}
    assert qd.is_quantize(qd.qint32(2.0)) and not qd.is_quantize(np.int8)
    with pytest.raises(OpArgumentError, match="outside"):
        qd.quint4(1.0, 16)
    with pytest.raises(OpArgumentError, match="symmetric"):
        qd.create_quantized_dtype(qd._builtin_quant_dtypes["qint8"], 1.0, 3)
    with pytest.raises(OpTypeError, match="zero point"):
        qd.get_zero_point(qd.qint8(1.0))
    q = qd.convert_to_qint8(np.array([0.25, -0.25, 0.75, 1000.0], F32), qd.qint8(0.5))
    assert q.tolist() == [1, -1, 2, 127] and qd.get_scale(q.dtype) == 0.5
    np.testing.assert_array_equal(qd.convert_from_qint8(q), [0.5, -0.5, 1.0, 63.5])
    assert Q.MinMaxObserver().get_quantized_dtype() == qd.qint8(1e-5)
