"""The quantization-aware modules (`eager.module.qat`) against their float modules plus fake
quantization computed here in numpy: each QAT layer's output in training, its gradients (the
straight-through estimator, against `jax.grad` of a jnp reference), the BatchNorm folding of
ConvBn2d in training and eval (and its `approx=False` form), the observers' statistics after
several steps, enabling and disabling observers and fake quantization, and the float modules
MegEngine provides for quantization (Elemwise's modes, Concat, BatchMatMulActivation, the
stubs, `disable_quantize`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.module.qat as QAT
import eager.quantization as Q
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError
from tests.helpers import randn, randn_array

I8, I8N, I32 = (-128, 127), (-127, 127), (-(2 ** 31), 2 ** 31 - 1)


# ----- numpy references ----------------------------------------------------------------------
def _round(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)  # half away from zero, MegEngine's


def fake_quant(x, scale, qrange):
    x, scale = np.asarray(x, np.float32), np.float32(scale)
    return (np.clip(_round(x / scale), *qrange) * scale).astype(np.float32)


def minmax_scale(lo, hi, qrange, eps=1e-5):
    """A symmetric MinMaxObserver's scale for the range [lo, hi]."""
    bound = max(-min(0.0, float(lo)), max(0.0, float(hi)))
    return np.float32(max(np.float32(bound) / np.float32((qrange[1] - qrange[0]) / 2), eps))


def observed(x, qrange):
    """`x` fake-quantized with the scale a fresh MinMaxObserver gives after seeing it."""
    s = minmax_scale(x.min(), x.max(), qrange)
    return fake_quant(x, s, qrange), s


def _qat(module, qconfig=Q.min_max_fakequant_qconfig):
    qat = getattr(QAT, type(module).__name__).from_float_module(module)
    qat.set_qconfig(qconfig)
    return qat


def _stub(qconfig=Q.min_max_fakequant_qconfig):
    stub = QAT.QuantStub()
    stub.set_qconfig(qconfig)
    return stub


def _with_bias(m, seed):
    m.bias = eg.Parameter(randn(*m.bias.shape, seed=seed) * 0.3)
    return m


# (float module, input shape, the method running it with another weight and bias, relu after)
LAYERS = {
    "Conv2d": (lambda: M.Conv2d(3, 4, 3, padding=1), (2, 3, 6, 6), "calc_conv", False),
    "ConvRelu2d": (lambda: M.ConvRelu2d(3, 4, 3, stride=2), (2, 3, 7, 7), "calc_conv", True),
    "ConvTranspose2d": (lambda: M.ConvTranspose2d(3, 4, 3, stride=2), (2, 3, 4, 4),
                        "calc_conv_transpose2d", False),
    "ConvTransposeRelu2d": (lambda: M.ConvTransposeRelu2d(3, 4, 2), (2, 3, 4, 4),
                            "calc_conv_transpose2d", True),
    "Linear": (lambda: M.Linear(5, 4), (3, 5), "calc_linear", False),
    "LinearRelu": (lambda: M.LinearRelu(5, 4), (3, 5), "calc_linear", True),
    "BatchMatMulActivation": (lambda: M.BatchMatMulActivation(2, 3, 4, nonlinear_mode="relu"),
                              (2, 3, 4), "_calc_linear", False),
}


@pytest.mark.parametrize("name", LAYERS)
def test_a_qat_layer_is_its_float_layer_on_fake_quantized_weight_bias_and_input(name):
    make, shape, calc, relu = LAYERS[name]
    float_m = _with_bias(make(), seed=1)
    qat, stub = _qat(float_m), _stub()
    assert qat.weight is float_m.weight and qat.bias is float_m.bias  # shared, not copied
    x = randn(*shape, seed=2)
    got = qat(stub(x)).numpy()

    xq, s_in = observed(x.numpy(), I8)
    wq, s_w = observed(float_m.weight.numpy(), I8N)
    bq = fake_quant(float_m.bias.numpy(), s_in * s_w, I32)
    y = getattr(float_m, calc)(eg.tensor(xq), eg.tensor(wq), eg.tensor(bq)).numpy()
    y = np.maximum(y, 0) if relu else y
    want, _ = observed(y, I8)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", LAYERS)
def test_with_fake_quantization_disabled_a_qat_layer_computes_its_float_layer(name):
    make, shape, _, _ = LAYERS[name]
    float_m = _with_bias(make(), seed=3)
    qat = _qat(float_m, Q.ema_fakequant_qconfig)
    Q.disable_fake_quant(qat)
    x = randn(*shape, seed=4)
    np.testing.assert_allclose(qat(x).numpy(), float_m(x).numpy(), rtol=1e-6, atol=1e-6)
    assert qat.act_observer.max_val.item() == pytest.approx(float(float_m(x).numpy().max()))


# ----- gradients: the straight-through estimator ----------------------------------------------
def _jround(v):
    return jax.lax.round(v, jax.lax.RoundingMethod.AWAY_FROM_ZERO)


def jfake_quant(v, qrange, scale=None):
    """Fake quantization with MegEngine's gradient: straight through where the rounded value is
    inside the range, zero outside; the scale, from an observer, takes none."""
    if scale is None:
        scale = jnp.maximum(jnp.maximum(-jnp.minimum(v.min(), 0), jnp.maximum(v.max(), 0))
                            / ((qrange[1] - qrange[0]) / 2), 1e-5)
    scale = jax.lax.stop_gradient(scale)
    r = _jround(v / scale)
    inside = (r >= qrange[0]) & (r <= qrange[1])
    passed = jnp.where(inside, v, jax.lax.stop_gradient(v))
    return passed + jax.lax.stop_gradient(jnp.clip(r, *qrange) * scale - passed), scale


def _grads(module, stub, x, cot, params):
    x = eg.Parameter(x)
    gm = GradManager().attach([x, *params])
    with gm:
        out = module(stub(x))
        gm.backward((out * cot).sum())
    return out.numpy(), [x.grad.numpy()] + [p.grad.numpy() for p in params]


def test_a_qat_linear_passes_gradients_straight_through_the_fake_quantization():
    float_m = _with_bias(M.Linear(6, 5), seed=5)
    qat, stub = _qat(float_m), _stub()
    x, cot = randn(4, 6, seed=6), randn_array(4, 5, seed=7)
    # The output's largest magnitude sits on a rounding tie by construction (max / (max / 127.5)
    # = 127.5): whether it rounds inside the grid hangs on the last bit of a matrix product,
    # which XLA may sum in another order than the reference, and it decides that element's
    # straight-through mask (jax 0.12 flips it). No cotangent there, so the comparison does
    # not rest on a tie.
    xq_ref = jfake_quant(jnp.asarray(x.numpy()), I8)[0]
    wq_ref = jfake_quant(jnp.asarray(float_m.weight.numpy()), I8N)[0]
    pre = np.asarray(xq_ref @ wq_ref.T) + float_m.bias.numpy()
    cot = np.asarray(cot).copy()
    cot[np.unravel_index(np.abs(pre).argmax(), pre.shape)] = 0
    out, grads = _grads(qat, stub, x, cot, [qat.weight, qat.bias])

    def ref(x, w, b):
        xq, s_in = jfake_quant(x, I8)
        wq, s_w = jfake_quant(w, I8N)
        bq, _ = jfake_quant(b, I32, s_in * s_w)
        y, _ = jfake_quant(xq @ wq.T + bq, I8)
        return (y * cot).sum(), y

    args = [jnp.asarray(t.numpy()) for t in (x, float_m.weight, float_m.bias)]
    (_, y), want = jax.value_and_grad(ref, argnums=(0, 1, 2), has_aux=True)(*args)
    np.testing.assert_allclose(out, y, rtol=1e-5, atol=1e-6)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# ----- ConvBn2d: the BatchNorm folded into the quantized weight ---------------------------------
def _conv_bn(groups=1, seed=8):
    m = M.ConvBnRelu2d(4, 6, 3, padding=1, groups=groups, bias=True)
    rng = np.random.default_rng(seed)
    m.load_state_dict({"conv.bias": rng.normal(size=6) * 0.2, "bn.weight": rng.uniform(0.5, 2, 6),
                       "bn.bias": rng.normal(size=6), "bn.running_mean": rng.normal(size=6),
                       "bn.running_var": rng.uniform(0.5, 2, 6)}, strict=False)
    return m


def _jconv(x, w, groups):
    if w.ndim == 5:  # MegEngine's grouped layout
        w = w.reshape(-1, *w.shape[2:])
    return jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                        feature_group_count=groups)


def _conv_bn_ref(m, training):
    """The QAT ConvBnRelu2d as jnp, MegEngine's folding written out, over (x, weight, gamma,
    beta): its output and the batch's pre-BatchNorm statistics."""
    groups, eps = m.conv.groups, m.bn.eps
    b, rm, rv = (jnp.asarray(t.numpy()).reshape(-1) for t in
                 (m.conv.bias, m.bn.running_mean, m.bn.running_var))

    def ref(x, w, gamma, beta):
        xq, s_in = jfake_quant(x, I8)
        factor = gamma / jnp.sqrt(rv + eps)
        shape = (-1, 1, 1, 1) if groups == 1 else (groups, -1, 1, 1, 1)
        wq, s_w = jfake_quant(w * factor.reshape(shape), I8N)
        channel = (1, -1, 1, 1)
        if training:
            y = _jconv(xq, wq, groups) / factor.reshape(channel) + b.reshape(channel)
            mean, var = y.mean(axis=(0, 2, 3)), y.var(axis=(0, 2, 3))
            y = (y - mean.reshape(channel)) / jnp.sqrt(var.reshape(channel) + eps)
            y = y * gamma.reshape(channel) + beta.reshape(channel)
        else:
            bq, _ = jfake_quant(beta + gamma * (b - rm) / jnp.sqrt(rv + eps), I32, s_in * s_w)
            y = _jconv(xq, wq, groups) + bq.reshape(channel)
            mean = var = None
        out, _ = jfake_quant(jnp.maximum(y, 0), I8)
        return out, (mean, var)

    return ref


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_conv_bn_folds_the_batchnorm_into_the_quantized_weight_as_megengine(groups, training):
    float_m = _conv_bn(groups)
    before = [t.numpy().reshape(-1) for t in (float_m.bn.running_mean, float_m.bn.running_var)]
    ref = _conv_bn_ref(float_m, training)  # (the statistics before the step moves them)
    qat, stub = _qat(float_m), _stub()
    qat.train(training)
    Q.enable_observer(qat)  # (eval() disables them, as in MegEngine: calibration enables them)
    x, cot = randn(2, 4, 5, 5, seed=9), randn_array(2, 6, 5, 5, seed=10)
    params = [qat.conv.weight, qat.bn.weight, qat.bn.bias]
    out, grads = _grads(qat, stub, x, cot, params)

    args = [jnp.asarray(x.numpy()), jnp.asarray(params[0].numpy()),
            *(jnp.asarray(p.numpy()).reshape(-1) for p in params[1:])]
    (want, (mean, var)) = ref(*args)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    want_grads = jax.grad(lambda *a: (ref(*a)[0] * cot).sum(), argnums=(0, 1, 2, 3))(*args)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-4, atol=1e-4)
    if training:  # the BatchNorm's running statistics follow the batch, with its momentum
        n = 2 * 5 * 5  # the elements of a channel
        np.testing.assert_allclose(qat.bn.running_mean.numpy().reshape(-1),
                                   0.9 * before[0] + 0.1 * np.asarray(mean), rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(qat.bn.running_var.numpy().reshape(-1),
                                   0.9 * before[1] + 0.1 * np.asarray(var) * n / (n - 1),
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("approx", [True, False], ids=["approx", "batch-folded"])
def test_conv_bn_without_fake_quantization_is_conv_then_batchnorm(training, approx):
    float_m, twin = _conv_bn(seed=11), _conv_bn(seed=11)
    twin.conv.weight = eg.Parameter(float_m.conv.weight.numpy())
    qat = _qat(float_m)
    Q.disable_fake_quant(qat)
    qat.train(training)
    twin.train(training)
    x = randn(3, 4, 5, 5, seed=12)
    got = F.relu(qat.calc_conv_bn_qat(x, approx=approx))
    np.testing.assert_allclose(got.numpy(), twin(x).numpy(), rtol=1e-4, atol=1e-5)
    for a, b in [(qat.bn.running_mean, twin.bn.running_mean),
                 (qat.bn.running_var, twin.bn.running_var)]:
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make, shape", [
    (lambda: M.ConvTransposeBn2d(3, 4, 3, groups=1), (2, 3, 4, 4)),
    (lambda: M.ConvTransposeBnRelu2d(4, 6, 3, groups=2), (2, 4, 4, 4)),
    (lambda: M.LinearBn1d(5, 4), (6, 5)),
    (lambda: M.LinearBnRelu1d(5, 4, bias=False), (6, 5)),
])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_the_other_bn_folds_without_fake_quantization_are_layer_then_batchnorm(make, shape,
                                                                               training):
    float_m = make()
    float_m.bn.load_state_dict({"running_var": np.linspace(0.5, 2, float_m.bn.num_features),
                                "weight": np.linspace(0.5, 1.5, float_m.bn.num_features)},
                               strict=False)
    x = randn(*shape, seed=13)
    float_m.train(training)
    want = float_m(x).numpy()  # before the QAT module's call moves the running statistics
    qat = _qat(float_m)
    Q.disable_fake_quant(qat)
    qat.train(training)
    np.testing.assert_allclose(qat(x).numpy(), want, rtol=1e-4, atol=1e-5)


# ----- observers' statistics ---------------------------------------------------------------------
def test_observers_follow_the_steps_ema_for_the_output_and_running_range_for_the_weight():
    float_m = _with_bias(M.Linear(5, 3), seed=14)
    qat = _qat(float_m, Q.ema_fakequant_qconfig)
    wq, _ = observed(float_m.weight.numpy(), I8N)
    low = high = None
    for step in range(3):
        x = randn(4, 5, seed=20 + step) * (step + 1)
        got = qat(x).numpy()
        y = x.numpy() @ wq.T + float_m.bias.numpy()  # no input qparams: the bias stays float
        low = y.min() if low is None else 0.9 * low + 0.1 * y.min()
        high = y.max() if high is None else 0.9 * high + 0.1 * y.max()
        np.testing.assert_allclose(qat.act_observer.min_val.item(), low, rtol=1e-5)
        np.testing.assert_allclose(qat.act_observer.max_val.item(), high, rtol=1e-5)
        want = fake_quant(y, minmax_scale(low, high, I8), I8)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    w = float_m.weight.numpy()
    assert qat.weight_observer.min_val.item() == pytest.approx(float(w.min()))
    assert qat.weight_observer.max_val.item() == pytest.approx(float(w.max()))


def test_a_disabled_observer_keeps_its_statistics_and_an_enabled_one_moves_them():
    qat = _qat(M.Conv2d(2, 3, 1), Q.ema_fakequant_qconfig)
    qat(randn(1, 2, 3, 3, seed=30))
    Q.disable_observer(qat)
    kept = qat.act_observer.max_val.item()
    qat(randn(1, 2, 3, 3, seed=31) * 10)
    assert qat.act_observer.max_val.item() == kept
    Q.enable_observer(qat)
    qat(randn(1, 2, 3, 3, seed=31) * 10)
    assert qat.act_observer.max_val.item() > kept


def test_qparams_and_dtypes_come_from_the_fake_quantizer_else_the_observer():
    qat = _qat(M.Linear(3, 2))
    out = qat(randn(2, 3, seed=32))
    assert out.qparams.scale.item() == pytest.approx(qat.get_activation_qparams().scale.item())
    assert qat.get_weight_dtype().name == "int8"  # np.dtype of MegEngine's qint8 (narrow)
    tqt = _qat(M.Linear(3, 2), Q.tqt_qconfig)
    assert tqt.weight_observer is None
    assert tqt.get_activation_qparams().scale.item() == pytest.approx(1.0)  # 2 ** 0
    assert repr(qat).startswith("QAT.Linear")


def test_stubs_elemwise_and_concat_quantize_their_output_and_have_no_weight_quantizers():
    x, y = randn(2, 4, seed=33), randn(2, 4, seed=34)
    stub = _stub()
    np.testing.assert_allclose(stub(x).numpy(), observed(x.numpy(), I8)[0], rtol=1e-6)
    assert stub.weight_observer is None and stub.weight_fake_quant is None
    dequant = _qat(M.DequantStub())
    assert dequant(x) is x and dequant.act_observer is None
    add = _qat(M.Elemwise("FUSE_ADD_RELU"))
    want = observed(np.maximum(x.numpy() + y.numpy(), 0), I8)[0]
    np.testing.assert_allclose(add(x, y).numpy(), want, rtol=1e-6)
    assert add.method == "FUSE_ADD_RELU" and add.weight_observer is None
    cat = _qat(M.Concat())
    want = observed(np.concatenate([x.numpy(), y.numpy()], 1), I8)[0]
    np.testing.assert_allclose(cat([x, y], axis=1).numpy(), want, rtol=1e-6)


# ----- the float modules MegEngine provides for quantization --------------------------------------
ELEMWISE = [("ADD", 2, np.add), ("SUB", 2, np.subtract), ("MUL", 2, np.multiply),
            ("TRUE_DIV", 2, np.divide), ("MAX", 2, np.maximum), ("MIN", 2, np.minimum),
            ("FUSE_ADD_RELU", 2, lambda a, b: np.maximum(a + b, 0)),
            ("FUSE_ADD_SIGMOID", 2, lambda a, b: 1 / (1 + np.exp(-(a + b)))),
            ("FUSE_ADD_TANH", 2, lambda a, b: np.tanh(a + b)),
            ("FUSE_MUL_ADD3", 3, lambda a, b, c: a * b + c),
            ("FUSE_MUL_ADD4", 4, lambda a, b, c, d: a * b + c * d),
            ("MOD", 2, np.fmod), ("FLOOR_DIV", 2, np.floor_divide),
            ("SWITCH_GT0", 2, lambda a, b: np.where(a > 0, b, 0)),
            ("COND_LEQ_MOV", 3, lambda a, b, c: np.where(a <= b, c, 0)),
            ("H_SWISH", 1, lambda a: a * np.clip(a + 3, 0, 6) / 6),
            ("FUSE_ADD_H_SWISH", 2, lambda a, b: (a + b) * np.clip(a + b + 3, 0, 6) / 6),
            ("relu", 1, lambda a: np.maximum(a, 0)), ("EXP", 1, np.exp), ("ABS", 1, np.abs)]


@pytest.mark.parametrize("mode, arity, ref", ELEMWISE, ids=[m for m, _, _ in ELEMWISE])
def test_elemwise_computes_megengines_mode(mode, arity, ref):
    args = [randn_array(3, 4, seed=40 + i) * 2 for i in range(arity)]
    got = M.Elemwise(mode)(*[eg.tensor(a) for a in args])
    np.testing.assert_allclose(got.numpy(), ref(*args), rtol=1e-5, atol=1e-6)


def test_elemwise_refuses_an_unknown_mode_and_a_wrong_number_of_inputs():
    with pytest.raises(OpArgumentError, match="unknown mode 'FUSE_ADD_GELU'"):
        M.Elemwise("FUSE_ADD_GELU")
    with pytest.raises(OpArgumentError, match=r"Elemwise\('ADD'\) takes 2 inputs, got 1"):
        M.Elemwise("ADD")(eg.ones(2))


def test_batch_matmul_activation_multiplies_each_batch_by_its_weight():
    m = M.BatchMatMulActivation(3, 4, 5, nonlinear_mode="RELU")
    assert m.weight.shape == (3, 5, 4) and m.bias.shape == (5,)
    _with_bias(m, seed=50)
    x = randn(3, 4, 5, seed=51)
    want = np.maximum(np.matmul(m.weight.numpy(), x.numpy()) + m.bias.numpy(), 0)
    np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(OpArgumentError, match="nonlinear_mode"):
        M.BatchMatMulActivation(1, 2, 2, nonlinear_mode="sigmoid")


def test_float_stubs_and_concat_and_linear_bn_state_as_megengine():
    x = randn(2, 3, seed=52)
    assert M.QuantStub()(x) is x and M.DequantStub()(x) is x
    assert M.Concat()([x, x]).shape == (4, 3)
    # MegEngine's LinearBn1d holds a bias of its own beside the Linear's; its state dicts do too
    assert list(M.LinearBn1d(3, 2).state_dict()) == [
        "bias", "bn.bias", "bn.running_mean", "bn.running_var", "bn.weight", "linear.bias",
        "linear.weight"]


def test_disable_quantize_marks_the_module_and_everything_below_it():
    net = M.Sequential(M.Linear(2, 2), M.Sequential(M.ReLU()))
    assert not any(m.quantize_disabled for m in net.modules())
    assert net[1].disable_quantize() is net[1]
    assert [m.quantize_disabled for m in net.modules()] == [False, False, True, True]
    net.disable_quantize(False)
    assert not any(m.quantize_disabled for m in net.modules())
