"""The int8 modules (`eager.module.quantized`) against their QAT forms: converted by
`quantize`, each computes, from the int8 input, what the QAT module computes from the
fake-quantized input, within one step of the output's grid (the QAT module convolves
fake-quantized floats in float32; the int8 one accumulates integers exactly). Also: they only
infer, `quantize`'s mapping and errors, a model's int8 forward compiled and dumped (MegEngine's
deployment path) against eager, and the zoo's three quantization models converted."""

import copy
import os
import sys

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.module.qat as QAT
import eager.module.quantized as QM
import eager.quantization as Q
import partial
from eager.quantization.dtype import get_scale
from tests.helpers import randn

# (float module, input shapes): each module takes int8 inputs from QuantStubs
LAYERS = {
    "Conv2d": (lambda: M.Conv2d(3, 4, 3, padding=1), [(2, 3, 6, 6)]),
    "ConvRelu2d": (lambda: M.ConvRelu2d(4, 6, 3, stride=2, groups=2), [(2, 4, 7, 7)]),
    "ConvBn2d": (lambda: M.ConvBn2d(3, 4, 3, padding=1), [(2, 3, 6, 6)]),
    "ConvBnRelu2d": (lambda: M.ConvBnRelu2d(4, 4, 3, groups=4, dilation=2), [(2, 4, 8, 8)]),
    "ConvTranspose2d": (lambda: M.ConvTranspose2d(3, 4, 3, stride=2), [(2, 3, 4, 4)]),
    "ConvTransposeRelu2d": (lambda: M.ConvTransposeRelu2d(3, 4, 2), [(2, 3, 4, 4)]),
    "ConvTransposeBn2d": (lambda: M.ConvTransposeBn2d(3, 4, 3, padding=1), [(2, 3, 5, 5)]),
    "Linear": (lambda: M.Linear(5, 4), [(3, 5)]),
    "LinearRelu": (lambda: M.LinearRelu(5, 4), [(3, 5)]),
    "LinearBn1d": (lambda: M.LinearBn1d(5, 4), [(6, 5)]),
    "LinearBnRelu1d": (lambda: M.LinearBnRelu1d(5, 4), [(6, 5)]),
    # without a bias: MegEngine's float layer adds it along the last axis, its int8 layer per
    # output feature (as a convolution's), so the two agree only without one
    "BatchMatMulActivation": (
        lambda: M.BatchMatMulActivation(2, 3, 4, bias=False, nonlinear_mode="relu"), [(2, 3, 5)]),
    "Elemwise": (lambda: M.Elemwise("FUSE_ADD_RELU"), [(2, 5), (2, 5)]),
    "ElemwiseMul": (lambda: M.Elemwise("MUL"), [(2, 5), (2, 5)]),
}


class _Net(M.Module):
    """QuantStubs in front of `layer`, a DequantStub behind it."""

    def __init__(self, layer, n_inputs):
        super().__init__()
        self.stubs = [M.QuantStub() for _ in range(n_inputs)]
        self.layer, self.dequant = layer, M.DequantStub()

    def forward(self, *xs):
        return self.dequant(self.layer(*[s(x) for s, x in zip(self.stubs, xs)]))


def _calibrated(name, seed=0):
    make, shapes = LAYERS[name]
    net = _Net(make(), len(shapes))
    if getattr(net.layer, "bias", None) is not None:
        net.layer.bias = eg.Parameter(randn(*net.layer.bias.shape, seed=seed) * 0.3)
    Q.quantize_qat(net, qconfig=Q.ema_fakequant_qconfig)
    xs = [randn(*s, seed=seed + 1 + i) for i, s in enumerate(shapes)]
    for _ in range(3):  # observers and BatchNorm statistics settle
        net(*xs)
    return net.eval(), xs


@pytest.mark.parametrize("name", LAYERS)
def test_an_int8_module_computes_its_qat_module_within_one_step(name):
    net, xs = _calibrated(name)
    want = net(*xs).numpy()
    step = get_scale(net.layer.get_activation_dtype())
    Q.quantize(net)
    assert isinstance(net.layer, QM.QuantizedModule)
    assert type(net.layer).__name__ == type(LAYERS[name][0]()).__name__
    net.eval()
    got = net(*xs).numpy()
    assert np.abs(got - want).max() <= step * 1.0001


def test_an_int8_layers_output_is_quantized_and_its_weight_int8():
    net, xs = _calibrated("ConvBnRelu2d")
    Q.quantize(net)
    net.eval()
    y = net.layer(net.stubs[0](xs[0]))
    assert y.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"
    assert net.layer.weight.dtype.metadata["mgb_dtype"]["name"] == "QuantizedS8"
    assert np.asarray(net.layer.weight.numpy()).dtype.itemsize == 1


def test_a_quantized_state_dict_loads_with_its_dtypes(tmp_path):
    net, xs = _calibrated("ConvBn2d")
    Q.quantize(net)
    net.eval()
    want = net(*xs).numpy()
    other = copy.deepcopy(net)
    other.layer.weight = eg.Parameter(np.zeros(net.layer.weight.shape, "float32"))
    other.load_state_dict(net.state_dict())  # quantized tensors: storage and dtype
    assert other.layer.weight.dtype.metadata == net.layer.weight.dtype.metadata
    np.testing.assert_array_equal(other(*xs).numpy(), want)
    path = str(tmp_path / "int8.ckpt")
    eg.save(net.state_dict(), path)  # keeps the storage; the module keeps its dtype
    again = copy.deepcopy(net)
    again.layer.weight.set_value(eg.zeros(net.layer.weight.shape).astype(net.layer.weight.dtype))
    again.load_state_dict(eg.load(path))
    np.testing.assert_array_equal(again(*xs).numpy(), want)


def test_int8_modules_only_infer():
    net, xs = _calibrated("Conv2d")
    Q.quantize(net)  # new modules start in training mode, as MegEngine's
    with pytest.raises(ValueError, match=r"call \.eval\(\)"):
        net(*xs)


def test_quantize_takes_a_mapping_and_names_a_qat_module_it_cannot_convert():
    class MyConv(QAT.Conv2d):
        pass

    class MyInt8(QM.Conv2d):
        pass

    net = M.Sequential(M.QuantStub(), M.Conv2d(3, 4, 3), M.DequantStub())
    Q.quantize_qat(net)
    net(randn(1, 3, 5, 5, seed=0))
    net[1].__class__ = MyConv
    with pytest.raises(NotImplementedError, match="MyConv"):
        Q.quantize(net, inplace=False)
    Q.quantize(net, mapping={MyConv: MyInt8})
    assert type(net[1]) is MyInt8


class _Block(M.Module):
    """A small residual int8 network, as the zoo's: conv-bn-relu, an add-relu, pooling."""

    def __init__(self):
        super().__init__()
        self.quant, self.dequant = M.QuantStub(), M.DequantStub()
        self.c1 = M.ConvBnRelu2d(3, 8, 3, padding=1)
        self.c2 = M.ConvBn2d(8, 8, 3, padding=1)
        self.add = M.Elemwise("FUSE_ADD_RELU")

    def forward(self, x):
        y = self.c1(self.quant(x))
        x = self.add(self.c2(y), y)
        x = F.avg_pool2d(F.max_pool2d(x, 2), 4)
        return self.dequant(F.flatten(x, 1))


def test_the_int8_model_traced_and_dumped_as_megengine_deploys_it(tmp_path):
    net = _Block()
    Q.quantize_qat(net)
    x = randn(2, 3, 8, 8, seed=5)
    for _ in range(2):
        net(x)
    Q.quantize(net)

    @partial.trace(symbolic=True, capture_as_const=True)
    def infer_func(data):
        net.eval()
        return F.softmax(net(data))

    net.eval()
    want = F.softmax(net(x)).numpy()
    np.testing.assert_array_equal(infer_func(x).numpy(), want)
    path = str(tmp_path / "int8.dump")
    infer_func.dump(path, arg_names=["data"])
    loaded = partial.load(path)
    assert loaded.manifest["inputs"][0]["name"] == "data"
    np.testing.assert_array_equal(loaded(x.numpy()).numpy(), want)
    assert "xi8>" in loaded.exported.mlir_module()  # the program computes on int8


def test_a_compiled_region_keeps_a_quantized_output_and_keys_by_scale():
    from eager.quantization.dtype import qint8

    @partial.partial_trace
    def pool(q):
        return F.max_pool2d(q, 2)

    x = randn(1, 1, 4, 4, seed=0)
    for scale in (0.1, 0.05):
        q = x.astype(qint8(scale))
        out = pool(q)
        assert get_scale(out.dtype) == scale
        np.testing.assert_array_equal(out.numpy(), F.max_pool2d(q, 2).numpy())
    assert pool.cache_info().entries == 2


# ----- the zoo's quantization models --------------------------------------------------------
MODELS = os.environ.get("MEGENGINE_MODELS", "/work/shared/megengine-models")
ZOO = ["resnet18", "shufflenet_v1_x0_5_g3", "mobilenet_v2"]


def _zoo_models():
    if not os.path.isdir(os.path.join(MODELS, "official", "quantization")):
        pytest.skip("MEGENGINE_MODELS has no official/quantization")
    sys.path.insert(0, MODELS)
    partial.alias_megengine()
    try:
        import importlib
        return importlib.import_module("official.quantization.models")
    finally:
        partial.unalias_megengine()
        sys.path.remove(MODELS)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ZOO)
def test_the_zoos_quantization_models_convert_to_int8(arch):
    model = getattr(_zoo_models(), arch)()
    Q.quantize_qat(model)
    x = randn(1, 3, 224, 224, seed=0)
    model(x)  # calibrates the observers
    model.eval()
    want = model(x).numpy()
    Q.quantize(model)
    model.eval()
    kinds = {type(m).__module__ for m in model.modules()}
    assert "eager.module.quantized.conv_bn" in kinds and "eager.module.qat.conv_bn" not in kinds
    got = model(x).numpy()
    # the classifier stays in float (disable_quantize); the features differ from QAT's by the
    # rounding of fake-quantized float convolutions (a tie rounded the other way, one step),
    # which grows over many layers: the logits agree in direction, not to the last digit
    assert got.argmax() == want.argmax()
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.98
