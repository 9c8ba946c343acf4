"""`eager.quantization.quantize`: `quantize_qat` on the model zoo's three quantization models
(ResNet-18, ShuffleNet V1, MobileNet V2, imported unchanged through the `megengine` alias from
`MEGENGINE_MODELS`), its options, `enable/disable_observer` and `_fake_quant`, `reset_qconfig`,
`apply_easy_quant`, `quantize`'s refusal, and a QAT training step under `partial_trace` and
`xla_trace` equal to eager: outputs, gradients, parameters and observer buffers."""

import importlib
import os
import sys

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.module.qat as QAT
import eager.optimizer as optim
import eager.quantization as Q
import partial
from eager.autodiff import GradManager
from eager.quantization.quantize import QuantizedModuleError, QuantizeError, hook_qat_module
from partial import partial_trace, xla_trace
from tests.helpers import labelled_batch, randn
from tests.partial.differential import World, check_against_eager

ZOO = os.environ.get("MEGENGINE_MODELS")
needs_zoo = pytest.mark.skipif(not ZOO, reason="MEGENGINE_MODELS (the model zoo) is not set")
ZOO_MODELS = {"resnet18": "fc", "shufflenet_v1_x0_5_g3": "classifier",
              "mobilenet_v2": "classifier"}


@pytest.fixture(scope="module")
def zoo():
    """The zoo's `official/quantization/models`, its code unchanged, `megengine` aliased."""
    sys.path.insert(0, ZOO)
    partial.alias_megengine(shadow=True)
    try:
        yield importlib.import_module("official.quantization.models")
    finally:
        partial.unalias_megengine()
        sys.path.remove(ZOO)


def _quantizers(model):
    """Every observer and fake quantizer of `model`'s QAT modules."""
    return [q for m in model.modules() if isinstance(m, QAT.QATModule)
            for q in (m.weight_observer, m.act_observer, m.weight_fake_quant, m.act_fake_quant)
            if q is not None]


# ----- the zoo's models ----------------------------------------------------------------------
@needs_zoo
@pytest.mark.parametrize("name", ZOO_MODELS)
def test_quantize_qat_converts_the_zoos_models_keeping_their_parameters(zoo, name):
    model = getattr(zoo, name)()
    before = dict(model.named_parameters())
    quantable = {n: type(m).__name__ for n, m in model.named_modules()
                 if type(m) in (M.ConvBn2d, M.ConvBnRelu2d, M.Elemwise, M.QuantStub,
                                M.DequantStub)}
    assert Q.quantize_qat(model, qconfig=Q.ema_fakequant_qconfig) is model
    modules = dict(model.named_modules())
    for n, kind in quantable.items():
        assert type(modules[n]) is getattr(QAT, kind), n
    classifier = ZOO_MODELS[name]  # disable_quantize()d by the zoo: it stays float
    assert not any(isinstance(m, QAT.QATModule) for m in modules[classifier].modules())
    # the same Parameters under the same names, so optimizers and checkpoints still fit
    after = dict(model.named_parameters())
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert any(k.endswith("act_observer.max_val") for k in model.state_dict())


@needs_zoo
@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_MODELS)
def test_a_zoo_qat_model_computes_the_float_model_without_fake_quantization(zoo, name):
    model = getattr(zoo, name)()
    model.eval()
    x = randn(2, 3, 224, 224, seed=0)
    want = model(x).numpy()
    Q.quantize_qat(model)
    model.eval()  # (QAT modules are made in training mode, as MegEngine makes them)
    Q.disable_fake_quant(model)  # eval folds each BatchNorm into its weight: the same values
    np.testing.assert_allclose(model(x).numpy(), want, rtol=1e-3, atol=1e-3)
    model.train()  # a QAT training forward: finite, and every module run has observed
    Q.enable_fake_quant(model)
    ran = []
    hook_qat_module(model, lambda m, inputs, out: ran.append(m))
    assert np.isfinite(model(x).numpy()).all()
    unseen = [type(m).__name__ for m in ran for q in (m.weight_observer, m.act_observer)
              if q is not None and not -1e38 < q.max_val.item() < 1e38]
    assert ran and not unseen, unseen


# ----- quantize_qat's options and the switches ---------------------------------------------------
class _Block(M.Module):
    def __init__(self):
        super().__init__()
        self.quant, self.dequant = M.QuantStub(), M.DequantStub()
        self.conv = M.ConvBnRelu2d(3, 4, 3, padding=1)
        self.branch = M.Sequential(M.ConvBn2d(4, 4, 1), M.ReLU())
        self.add = M.Elemwise("FUSE_ADD_RELU")
        self.heads = [M.Linear(4, 2), M.Linear(4, 3)]
        self.heads[1].disable_quantize()

    def forward(self, x):
        x = self.conv(self.quant(x))
        x = self.add(x, self.branch(x))
        x = self.dequant(F.flatten(F.avg_pool2d(x, x.shape[2:]), 1))
        return [h(x) for h in self.heads]


def test_quantize_qat_converts_the_top_quantable_modules_and_skips_the_disabled():
    net = Q.quantize_qat(_Block())
    assert type(net.conv) is QAT.ConvBnRelu2d and type(net.conv.conv) is M.Conv2d
    assert type(net.branch[0]) is QAT.ConvBn2d and type(net.branch[1]) is M.ReLU
    assert type(net.heads[0]) is QAT.Linear and type(net.heads[1]) is M.Linear
    assert isinstance(net.heads, list) and type(net.add) is QAT.Elemwise
    assert all(type(q).__name__ in ("MinMaxObserver", "ExponentialMovingAverageObserver",
                                    "FakeQuantize") for q in _quantizers(net))
    again = Q.quantize_qat(net, qconfig=Q.tqt_qconfig)  # QAT modules stay, with new quantizers
    assert type(again.conv) is QAT.ConvBnRelu2d and again.conv.weight_observer is None


def test_quantize_qat_not_inplace_and_with_a_mapping():
    class MyConv(M.Conv2d):
        pass

    net = M.Sequential(MyConv(2, 2, 1), M.Conv2d(2, 2, 1))
    with pytest.raises(QuantizeError, match=r"MyConv at '0' is a subclass .* mapping="):
        Q.quantize_qat(net, inplace=False)
    copy = Q.quantize_qat(net, inplace=False, mapping={MyConv: QAT.Conv2d})
    assert type(copy[0]) is QAT.Conv2d and type(copy[1]) is QAT.Conv2d
    assert type(net[0]) is MyConv and type(net[1]) is M.Conv2d  # the original is untouched


def test_observers_and_fake_quantization_switch_for_the_whole_model():
    net = Q.quantize_qat(_Block())
    observers = [q for q in _quantizers(net) if "Observer" in type(q).__name__]
    fakes = [q for q in _quantizers(net) if type(q).__name__ == "FakeQuantize"]
    Q.disable_observer(net)
    assert not any(q.enabled for q in observers) and all(q.enabled for q in fakes)
    Q.disable_fake_quant(net)
    assert not any(q.enabled for q in fakes)
    Q.enable_observer(net)
    Q.enable_fake_quant(net)
    assert all(q.enabled for q in observers + fakes)


def test_quantize_refuses_a_qat_module_it_has_no_int8_form_of_and_takes_a_mapping():
    class MyStub(QAT.QuantStub):
        pass

    net = Q.quantize_qat(M.Sequential(M.QuantStub(), M.Linear(3, 2)))
    net[0].__class__ = MyStub
    with pytest.raises(QuantizedModuleError, match=r"no int8 module for the QAT MyStub at "
                                                   r"'0'.*mapping"):
        Q.quantize(net, inplace=False)
    assert isinstance(QuantizedModuleError("x"), NotImplementedError)
    net[0].__class__ = QAT.QuantStub

    class Int8(M.Module):
        @classmethod
        def from_qat_module(cls, qat):
            return cls()

    done = Q.quantize(net, inplace=False, mapping={QAT.QuantStub: Int8, QAT.Linear: Int8})
    assert [type(m) for m in done] == [Int8, Int8] and type(net[1]) is QAT.Linear
    plain = M.Sequential(M.Linear(2, 2))
    assert Q.quantize(plain) is plain


def test_calibration_then_passive_qconfig_keeps_the_scales_and_easyquant_tunes_them():
    eg.random.seed(0)
    net = M.Sequential(M.QuantStub(), M.ConvRelu2d(3, 4, 3), M.DequantStub())
    Q.quantize_qat(net, qconfig=Q.calibration_qconfig)
    net.eval()
    Q.enable_observer(net)
    data = randn(4, 3, 8, 8, seed=1)
    net(data)
    calibrated = net[1].get_activation_qparams().scale.item()
    Q.reset_qconfig(net, Q.passive_qconfig)
    assert type(net[1].act_observer).__name__ == "PassiveObserver"
    assert net[1].get_activation_qparams().scale.item() == pytest.approx(calibrated)
    Q.apply_easy_quant(net, data, start=0.8, stop=1.2, num=5)
    tuned = net[1].get_activation_qparams().scale.item()
    assert 0.8 * calibrated - 1e-6 <= tuned <= 1.2 * calibrated + 1e-6
    assert not net[1]._forward_hooks  # the search removed its hooks


# ----- a QAT training step compiled ---------------------------------------------------------
class _Tiny(M.Module):
    """The zoo's ResNet in small: a stub, a ConvBnRelu2d stem, a residual block (ConvBnRelu2d,
    ConvBn2d, Elemwise("FUSE_ADD_RELU")), the float classifier."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = M.QuantStub(), M.DequantStub()
        self.stem = M.ConvBnRelu2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.conv1 = M.ConvBnRelu2d(8, 8, 3, padding=1, bias=False)
        self.conv2 = M.ConvBn2d(8, 8, 3, padding=1, bias=False)
        self.add = M.Elemwise("FUSE_ADD_RELU")
        self.fc = M.Linear(8, 4)
        self.fc.disable_quantize()

    def forward(self, x):
        x = self.stem(self.quant(x))
        x = self.add(self.conv2(self.conv1(x)), x)
        return self.fc(self.dequant(F.flatten(F.avg_pool2d(x, 4), 1)))


def _qat_step(whole, qconfig):
    def build(wrap):
        net = Q.quantize_qat(_Tiny(), qconfig=qconfig)
        opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        gm = GradManager().attach(net.parameters())
        backbone = wrap(net) if not whole else net

        def train(x, y):
            with gm:
                logits = backbone(x)
                loss = F.cross_entropy(logits, y)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss, logits

        compiled = wrap(train) if whole else train

        def step(i):
            if i == 3:  # switches between steps: the compiled step must follow them
                Q.disable_observer(net)
            if i == 4:
                Q.disable_fake_quant(net)
            return compiled(*labelled_batch((i, 7), (4, 3, 8, 8), classes=4))

        return World(step, modules=[net], optimizers=[opt])

    return build


# A symmetric qint8 scale, bound / 127.5, puts a batch's extreme element exactly on a rounding
# tie (x / s = +-127.5), so the last bit of the compiled arithmetic decides it: these steps
# check that compiled code computes the scale and x / s as eager does (and MegEngine does).
@pytest.mark.slow  # five training steps, each way (~13 s)
@pytest.mark.parametrize("qconfig", [Q.tqt_qconfig, Q.ema_fakequant_qconfig,
                                     Q.min_max_fakequant_qconfig], ids=["tqt", "ema", "minmax"])
@pytest.mark.parametrize("whole", [False, True], ids=["partial_trace", "xla_trace"])
def test_a_qat_step_compiled_trains_as_eager_observers_included(whole, qconfig):
    check_against_eager(_qat_step(whole, qconfig), steps=5, rtol=2e-5, atol=2e-5,
                        compile=xla_trace if whole else partial_trace)


@pytest.mark.parametrize("compile", [partial_trace, xla_trace], ids=["partial_trace",
                                                                     "xla_trace"])
def test_the_shipped_qconfig_observes_and_fake_quantizes_compiled_as_eager(compile):
    def forward(wrap):
        eg.random.seed(0)
        net = Q.quantize_qat(_Tiny(), qconfig=Q.ema_fakequant_qconfig)
        run = wrap(net)
        for i in range(2):  # capture, then the compiled entry
            logits = run(labelled_batch((i, 7), (4, 3, 8, 8), classes=4)[0])
        return logits.numpy(), {k: v.numpy() for k, v in net.named_buffers()}

    (got, got_state), (want, want_state) = forward(compile), forward(lambda f: f)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got_state.keys() == want_state.keys()
    for k in want_state:
        np.testing.assert_allclose(got_state[k], want_state[k], rtol=1e-5, atol=1e-6, err_msg=k)
