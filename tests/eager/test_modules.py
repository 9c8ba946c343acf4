"""Tests for `eager.module`: parameter and buffer discovery with dotted names, containers
(Sequential, ModuleList, ModuleDict), `apply` and `requires_grad_`, modes, state dicts, and the
forward pass of the common layers against an independent numpy reference (convolutions by
explicit loops, normalizations by hand, attention rebuilt from the layer's own parameters).
BatchNorm, the activations, the recurrent and the image layers have files of their own
(`test_modules_<topic>.py`).
"""

import math
from collections import OrderedDict

import numpy as np
import pytest

import eager as eg
import eager.module as M
from eager.autodiff import GradManager
from tests.helpers import normal

from .references import conv2d_ref, normalize_ref, per_channel

RTOL, ATOL = 1e-5, 1e-6
CONV_TOL = dict(rtol=1e-4, atol=1e-5)


def _close(actual, expected, **tol):
    np.testing.assert_allclose(np.asarray(actual), expected, **({"rtol": RTOL, "atol": ATOL}
                                                                | tol))


# ----- numpy references -------------------------------------------------------------------------
def conv_transpose2d_ref(x, w, b=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0),
                         dilation=(1, 1), groups=1):
    """Scatter form: every input pixel adds `x * w[ci, co]` at `i*stride - padding + k*dilation`."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    cin_g = cin // groups
    full = np.zeros((n, cout_g * groups, (h - 1) * sh + dh * (kh - 1) + 1 + oph,
                     (wd - 1) * sw + dw * (kw - 1) + 1 + opw))
    for g in range(groups):
        xs = x[:, g * cin_g:(g + 1) * cin_g]
        ws = w[g * cin_g:(g + 1) * cin_g]
        for i in range(kh):
            for j in range(kw):
                full[:, g * cout_g:(g + 1) * cout_g,
                     i * dh:i * dh + sh * (h - 1) + 1:sh,
                     j * dw:j * dw + sw * (wd - 1) + 1:sw] += np.einsum("nchw,co->nohw", xs,
                                                                        ws[:, :, i, j])
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = full[:, :, ph:ph + oh, pw:pw + ow]
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# ----- discovery and naming ---------------------------------------------------------------------
class Block(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(2, 2, 3, padding=1, bias=False)
        self.bn1 = M.BatchNorm2d(2)

    def forward(self, x):
        return self.bn1(self.conv1(x))


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.scale = eg.Parameter(eg.ones((2,)))
        self.layer1 = M.Sequential(Block(), Block())
        self.heads = [M.Linear(2, 3), M.Linear(3, 1, bias=False)]
        self.extra = {"proj": M.Linear(1, 1)}
        self.step = eg.zeros(())


# MegEngine's order: depth first, attributes by sorted name (checked against MegEngine 1.13)
NET_PARAMS = [
    "extra.proj.bias", "extra.proj.weight",
    "heads.0.bias", "heads.0.weight", "heads.1.weight",
    "layer1.0.bn1.bias", "layer1.0.bn1.weight", "layer1.0.conv1.weight",
    "layer1.1.bn1.bias", "layer1.1.bn1.weight", "layer1.1.conv1.weight",
    "scale",
]
NET_BUFFERS = [
    "layer1.0.bn1.running_mean", "layer1.0.bn1.running_var",
    "layer1.1.bn1.running_mean", "layer1.1.bn1.running_var",
    "step",
]
NET_STATE = sorted(NET_PARAMS + NET_BUFFERS)  # one walk over both, as MegEngine's state_dict


def test_named_parameters_use_dotted_index_names():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == NET_PARAMS
    assert [p for _, p in net.named_parameters()] == net.parameters()
    assert all(isinstance(p, eg.Parameter) for p in net.parameters())
    assert net.parameters()[7] is net.layer1[0].conv1.weight
    assert next(net.parameters()) is net.extra["proj"].bias  # an iterator, as MegEngine's


def test_named_buffers_hold_non_parameter_tensors():
    net = Net()
    assert [n for n, _ in net.named_buffers()] == NET_BUFFERS
    assert all(not isinstance(b, eg.Parameter) for b in net.buffers())
    assert net.buffers()[0] is net.layer1[0].bn1.running_mean


def test_sequential_from_ordered_dict_names_children_by_key():
    seq = M.Sequential(OrderedDict([("fc", M.Linear(2, 3)), ("act", M.ReLU()),
                                    ("out", M.Linear(3, 1))]))
    assert [n for n, _ in seq.named_parameters()] == ["fc.bias", "fc.weight", "out.bias",
                                                      "out.weight"]
    assert len(seq) == 3
    assert isinstance(seq[1], M.ReLU)


def test_slicing_a_container_gives_one_of_the_same_kind_sharing_the_modules():
    a, b, c = M.Linear(2, 3), M.ReLU(), M.Linear(3, 1)
    head = M.Sequential(a, b, c)[:2]
    assert isinstance(head, M.Sequential) and list(head) == [a, b]
    assert head(eg.ones((4, 2))).shape == (4, 3)
    rest = M.ModuleList([a, b, c])[1:]
    assert isinstance(rest, M.ModuleList) and list(rest) == [b, c]


def test_shared_parameter_and_module_listed_once():
    a, b = M.Linear(3, 3), M.Linear(3, 3)
    b.weight = a.weight
    seq = M.Sequential(a, b, a)
    names = [n for n, _ in seq.named_parameters()]
    assert names == ["0.bias", "0.weight", "1.bias"]
    assert len(seq.parameters()) == 3
    assert len(seq.modules()) == 3
    assert list(seq.state_dict()) == names


def test_a_module_reachable_twice_is_named_by_its_first_name_in_sorted_order():
    """The zoo's FPN keeps each conv as `fpn_lateral3` and in the list `lateral_convs`:
    MegEngine names it once, by the name that sorts first, and so does this project."""
    class Neck(M.Module):
        def __init__(self):
            super().__init__()
            self.lateral_convs = [M.Linear(1, 1)]
            self.fpn_lateral3 = self.lateral_convs[0]

    names = [n for n, _ in Neck().named_parameters()]
    assert names == ["fpn_lateral3.bias", "fpn_lateral3.weight"]
    assert list(Neck().state_dict()) == names


def test_parameters_filter_by_attribute_and_iterate_with_next():
    net = M.Sequential(M.Linear(2, 2), M.Linear(2, 1))
    net[0].requires_grad_(False)
    params = net.parameters(requires_grad=True)
    assert params == [net[1].bias, net[1].weight]
    assert next(params) is net[1].bias and next(params) is net[1].weight
    with pytest.raises(StopIteration):
        next(params)
    assert len(net.parameters() + net.parameters()) == 8


def test_children_and_modules():
    net = Net()
    kids = net.children()
    assert kids == [net.extra["proj"], net.heads[0], net.heads[1], net.layer1]
    mods = net.modules()
    assert mods[0] is net
    assert len(mods) == 1 + 1 + 2 * 3 + 2 + 1
    assert {id(m) for m in mods} >= {id(net.layer1[1].bn1), id(net.extra["proj"])}
    assert [n for n, _ in net.named_modules()][:6] == ["", "extra.proj", "heads.0", "heads.1",
                                                       "layer1", "layer1.0"]


def test_module_list_indexing_append_and_iteration():
    ml = M.ModuleList([M.Linear(2, 2), M.ReLU()])
    ml.append(M.Linear(2, 4))
    assert len(ml) == 3
    assert [type(m).__name__ for m in ml] == ["Linear", "ReLU", "Linear"]
    assert ml[-1].weight.shape == (4, 2)
    assert [n for n, _ in ml.named_parameters()] == ["0.bias", "0.weight", "2.bias", "2.weight"]
    with pytest.raises(TypeError):
        ml.append(3)


def test_train_eval_recurse_and_return_self():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    assert net.train() is net
    assert all(m.training for m in net.modules())
    net.layer1.train(False)
    assert net.training and not net.layer1[1].bn1.training and net.heads[0].training


def test_zero_grad_zeros_every_gradient_in_place_as_megengine():
    net = Net()
    params = list(net.parameters())
    for p in params[1:]:
        p.grad = eg.ones(p.shape)
    held = [p.grad for p in params]
    with pytest.warns(DeprecationWarning, match="clear_grad"):
        net.zero_grad()
    assert params[0].grad is None  # no gradient yet: none made
    for p, g in zip(params[1:], held[1:]):
        assert p.grad is g and g.shape == p.shape and not g.numpy().any()


def test_structure_version_bumps_on_tensor_and_module_attributes():
    net = M.Linear(2, 2)
    v0 = net.structure_version
    net.weight = eg.Parameter(eg.zeros((2, 2)))
    v1 = net.structure_version
    net.sub = M.ReLU()
    v2 = net.structure_version
    net.bias = None
    v3 = net.structure_version
    net.blocks = [M.Linear(1, 1)]
    v4 = net.structure_version
    assert v0 < v1 < v2 < v3 < v4
    net.note = 3
    assert net.structure_version == v4


# ----- ModuleDict, apply, requires_grad_ ----------------------------------------------------------
def test_module_dict_names_children_by_key():
    d = M.ModuleDict({"enc": M.Linear(2, 3), "act": M.ReLU()})
    d["dec"] = M.Linear(3, 1)
    assert list(d) == ["enc", "act", "dec"] and len(d) == 3 and "act" in d
    # PyTorch's class: its entries in insertion order, each one's tensors in MegEngine's order
    assert [n for n, _ in d.named_parameters()] == ["enc.bias", "enc.weight", "dec.bias",
                                                    "dec.weight"]
    assert [n for n, _ in d.named_children()] == ["enc", "act", "dec"]
    assert d["dec"].weight is d.parameters()[3]
    assert isinstance(d["act"], M.ReLU) and list(d.keys()) == list(d)

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.heads = M.ModuleDict([("cls", M.Linear(4, 2)), ("box", M.Linear(4, 4))])
            self.norm = M.BatchNorm1d(4)

    net = Net()
    assert list(net.state_dict()) == [
        "heads.cls.bias", "heads.cls.weight", "heads.box.bias", "heads.box.weight",
        "norm.bias", "norm.running_mean", "norm.running_var", "norm.weight"]
    other = Net()
    other.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(other.heads["box"].weight.numpy(),
                                  net.heads["box"].weight.numpy())


def test_module_dict_changes_are_seen():
    d = M.ModuleDict()
    v0 = d.structure_version
    d["a"] = M.Linear(1, 1)
    assert d.structure_version > v0
    replaced = M.Linear(1, 2)
    d["a"] = replaced
    assert d.parameters()[1] is replaced.weight
    assert d.pop("a") is replaced and len(d) == 0 and d.parameters() == []
    d.update({"b": M.ReLU()})
    del d["b"]
    assert len(d) == 0
    for bad in ("", "x.y", 3):
        with pytest.raises(KeyError):
            d[bad] = M.ReLU()
    with pytest.raises(TypeError):
        d["z"] = 3


def test_module_apply_visits_children_first_each_once():
    shared = M.Linear(2, 2)
    net = M.Sequential(shared, M.Sequential(M.ReLU(), shared), M.Tanh())
    order = []
    assert net.apply(order.append) is net
    assert order == [shared, net[1][0], net[1], net[2], net]

    def init_(m):
        if isinstance(m, M.Linear):
            m.load_state_dict({"weight": np.eye(2, dtype=np.float32),
                               "bias": np.zeros(2, np.float32)})

    net.apply(init_)
    x = np.array([[-1.0, 2.0]], np.float32)
    np.testing.assert_allclose(net(eg.tensor(x)).numpy(), np.tanh(np.maximum(x, 0)), rtol=1e-6)


def test_requires_grad_sets_every_parameter_flag():
    net = M.Sequential(M.Linear(2, 3), M.BatchNorm1d(3), M.Linear(3, 1))
    assert net.requires_grad_(False) is net
    assert all(p.requires_grad is False for p in net.parameters())
    net[2].requires_grad_()
    assert [p.requires_grad for p in net.parameters()] == [False] * 4 + [True] * 2


def test_frozen_submodule_gets_no_gradient(rng):
    net = M.Sequential(M.Linear(2, 3), M.ReLU(), M.Linear(3, 1))
    net[0].requires_grad_(False)
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward(net(eg.tensor(normal(rng, 4, 2))).sum())
    assert [p.grad is None for p in net.parameters()] == [True, True, False, False]


# ----- state dicts ------------------------------------------------------------------------------
def test_state_dict_is_numpy_and_round_trips(rng):
    src, dst = Net(), Net()
    state = src.state_dict()
    assert list(state) == NET_STATE
    assert all(type(v) is np.ndarray for v in state.values())
    state["layer1.0.bn1.running_mean"] = normal(rng, 2)
    dst.load_state_dict(state)
    for name, t in list(dst.named_parameters()) + list(dst.named_buffers()):
        np.testing.assert_array_equal(t.numpy().reshape(state[name].shape), state[name])
        assert t.dtype == np.float32


def test_state_dict_is_a_copy():
    lin = M.Linear(2, 2)
    before = lin.weight.numpy()
    state = lin.state_dict()
    state["weight"][...] = 7.0
    np.testing.assert_array_equal(lin.weight.numpy(), before)


def test_load_state_dict_accepts_tensors_and_keeps_identity():
    lin = M.Linear(2, 3)
    weight = lin.weight
    lin.load_state_dict({"weight": eg.ones((3, 2)), "bias": np.arange(3, dtype=np.float32)})
    assert lin.weight is weight
    np.testing.assert_array_equal(lin.weight.numpy(), np.ones((3, 2)))
    np.testing.assert_array_equal(lin(eg.zeros((1, 2))).numpy(), [[0.0, 1.0, 2.0]])


def test_load_state_dict_strict_missing_and_unexpected_keys():
    lin = M.Linear(2, 3)
    state = lin.state_dict()
    with pytest.raises(KeyError, match="bias"):
        lin.load_state_dict({"weight": state["weight"]})
    with pytest.raises(KeyError, match="extra"):
        lin.load_state_dict({**state, "extra": np.zeros(1, np.float32)})
    lin.load_state_dict({"weight": np.zeros((3, 2), np.float32), "extra": 1.0}, strict=False)
    np.testing.assert_array_equal(lin.weight.numpy(), 0.0)
    np.testing.assert_array_equal(lin.bias.numpy(), state["bias"])


def test_load_state_dict_shape_mismatch_raises():
    lin = M.Linear(2, 3)
    with pytest.raises(ValueError, match="shape"):
        lin.load_state_dict({"weight": np.zeros((2, 3), np.float32),
                             "bias": np.zeros(3, np.float32)})


# ----- Linear and convolutions ------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear_forward(rng, bias):
    lin = M.Linear(4, 3, bias=bias)
    assert lin.weight.shape == (3, 4)
    assert (lin.bias is None) != bias
    x = normal(rng, 5, 4)
    expected = x.astype(np.float64) @ lin.weight.numpy().T
    if bias:
        expected = expected + lin.bias.numpy()
    _close(lin(eg.tensor(x)).numpy(), expected)
    _close(lin(eg.tensor(x[None])).numpy(), expected[None])


@pytest.mark.parametrize("make, fan_in", [
    (lambda: M.Linear(48, 40), 48),
    (lambda: M.Conv2d(6, 8, 3, groups=2), 6 * 9),  # every input channel, whatever the groups
    (lambda: M.Conv1d(4, 10, 5), 4 * 5),
    (lambda: M.ConvTranspose2d(4, 6, 3, groups=2), 6 * 9),  # the output channels
], ids=["linear", "conv2d", "conv1d", "conv_transpose2d"])
def test_default_init_is_megengines_normal(make, fan_in):
    """MegEngine 1.13's draw: weight N(0, 1 / fan_in), bias zeros (the parity case
    `default_initialization_as_megengine` compares the spread with MegEngine's)."""
    layer = make()
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert not b.any()
    std = 1 / math.sqrt(fan_in)
    assert abs(w.std() - std) < 0.2 * std and abs(w.mean()) < 0.2 * std
    assert np.abs(w).max() > 1.5 * std  # a normal's tail, beyond a uniform's bound
    assert len(np.unique(w)) > 0.99 * w.size  # independent draws (float32 ones may collide)


@pytest.mark.parametrize("cfg", [
    dict(),
    dict(stride=2, padding=1),
    dict(padding=(1, 0), dilation=2),
    dict(groups=2, stride=(1, 2)),
    dict(groups=4, padding=2, bias=False),
])
def test_conv2d_forward(rng, cfg):
    conv = M.Conv2d(4, 8, (3, 2), **cfg)
    groups = cfg.get("groups", 1)
    # MegEngine's shapes: a grouped weight has a leading groups axis
    assert conv.weight.shape == ((8, 4, 3, 2) if groups == 1 else (groups, 8 // groups,
                                                                   4 // groups, 3, 2))
    x = normal(rng, 2, 4, 7, 6)
    b = None if conv.bias is None else conv.bias.numpy()
    weight = conv.weight.numpy().reshape(8, 4 // groups, 3, 2)
    expected = conv2d_ref(x, weight, b, conv.stride, conv.padding, conv.dilation, conv.groups)
    out = conv(eg.tensor(x))
    assert out.shape == expected.shape
    _close(out.numpy(), expected, **CONV_TOL)


@pytest.mark.parametrize("cfg", [dict(), dict(stride=2, padding=2, dilation=2, groups=3)])
def test_conv1d_forward(rng, cfg):
    conv = M.Conv1d(3, 6, 3, **cfg)
    groups = cfg.get("groups", 1)
    assert conv.weight.shape == ((6, 3, 3) if groups == 1 else (groups, 6 // groups, 1, 3))
    x = normal(rng, 2, 3, 9)
    weight = conv.weight.numpy().reshape(6, 3 // groups, 1, 3)
    expected = conv2d_ref(x[:, :, None], weight, conv.bias.numpy(),
                          (1, *conv.stride), (0, *conv.padding), (1, *conv.dilation),
                          conv.groups)[:, :, 0]
    _close(conv(eg.tensor(x)).numpy(), expected, **CONV_TOL)


@pytest.mark.parametrize("cfg, out_hw", [
    (dict(), (6, 7)),
    (dict(stride=2, padding=1), (7, 9)),
    (dict(stride=2, padding=1, output_padding=1), (8, 10)),
    (dict(stride=(2, 3), output_padding=(1, 2), groups=2), (10, 17)),
    (dict(dilation=2, padding=1, groups=2, bias=False), (6, 7)),
])
def test_conv_transpose2d_forward_and_shape(rng, cfg, out_hw):
    conv = M.ConvTranspose2d(4, 6, 3, **cfg)
    groups = cfg.get("groups", 1)
    assert conv.weight.shape == ((4, 6, 3, 3) if groups == 1 else (groups, 4 // groups,
                                                                   6 // groups, 3, 3))
    x = normal(rng, 2, 4, 4, 5)
    b = None if conv.bias is None else conv.bias.numpy()
    weight = conv.weight.numpy().reshape(4, 6 // groups, 3, 3)
    expected = conv_transpose2d_ref(x, weight, b, conv.stride, conv.padding,
                                    conv.output_padding, conv.dilation, groups)
    out = conv(eg.tensor(x))
    assert out.shape == (2, 6, *out_hw) == expected.shape
    _close(out.numpy(), expected, **CONV_TOL)


@pytest.mark.parametrize("cfg", [
    dict(),
    dict(stride=2, padding=1, output_padding=(1, 0)),
    dict(stride=(2, 1), padding=(0, 1), dilation=(1, 2), groups=2, output_padding=(1, 0)),
])
def test_conv_transpose2d_is_adjoint_of_conv2d(rng, cfg):
    """<conv2d(x, W), y> == <x, conv_transpose2d(y, W)> for the same weight array."""
    tconv = M.ConvTranspose2d(6, 4, 3, bias=False, **cfg)
    kw = {k: v for k, v in cfg.items() if k != "output_padding"}
    conv = M.Conv2d(4, 6, 3, bias=False, **kw)
    conv.load_state_dict({"weight": tconv.weight.numpy()})
    x = normal(rng, 2, 4, 8, 7)
    cx = conv(eg.tensor(x))
    y = normal(rng, *cx.shape)
    ty = tconv(eg.tensor(y))
    assert ty.shape == x.shape
    lhs = np.vdot(cx.numpy().astype(np.float64), y)
    rhs = np.vdot(x.astype(np.float64), ty.numpy())
    assert lhs == pytest.approx(rhs, rel=1e-4, abs=1e-3)


def test_conv_rejects_channels_not_divisible_by_groups():
    with pytest.raises(ValueError, match="groups"):
        M.Conv2d(3, 4, 3, groups=2)


# ----- other normalizations, embedding, dropout -------------------------------------------------
@pytest.mark.parametrize("normalized_shape, affine", [(5, True), ((3, 5), True), (5, False)])
def test_layernorm_forward(rng, normalized_shape, affine):
    ln = M.LayerNorm(normalized_shape, eps=1e-4, affine=affine)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    x = normal(rng, 2, 3, 5) * 2 + 1
    axes = tuple(range(3 - len(shape), 3))
    expected = normalize_ref(x, axes, 1e-4)
    if affine:
        assert ln.weight.shape == shape
        w, b = normal(rng, *shape), normal(rng, *shape)
        ln.load_state_dict({"weight": w, "bias": b})
        expected = expected * w + b
    else:
        assert ln.parameters() == []
    _close(ln(eg.tensor(x)).numpy(), expected, atol=5e-6)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_groupnorm_forward(rng, groups):
    gn = M.GroupNorm(groups, 6)
    w, b = normal(rng, 6), normal(rng, 6)
    gn.load_state_dict({"weight": w, "bias": b})
    x = normal(rng, 2, 6, 3, 2) * 2 + 1
    grouped = x.reshape(2, groups, -1)
    expected = normalize_ref(grouped, (2,), 1e-5).reshape(x.shape)
    expected = expected * per_channel(w, 4) + per_channel(b, 4)
    _close(gn(eg.tensor(x)).numpy(), expected, atol=5e-6)


def test_groupnorm_rejects_indivisible_channels():
    with pytest.raises(ValueError):
        M.GroupNorm(4, 6)(eg.zeros((1, 6, 2, 2)))


def test_embedding_looks_up_rows():
    emb = M.Embedding(7, 3)
    assert emb.weight.shape == (7, 3)
    idx = np.array([[0, 6, 2], [2, 2, 5]], np.int32)
    out = emb(eg.tensor(idx))
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[idx])


def test_embedding_init_is_standard_normal():
    w = M.Embedding(400, 10).weight.numpy()
    assert abs(w.mean()) < 0.1 and abs(w.std() - 1) < 0.1


def test_dropout_train_zeroes_and_rescales():
    drop = M.Dropout(0.3)
    x = np.arange(1, 20001, dtype=np.float32).reshape(100, 200)
    out = drop(eg.tensor(x)).numpy()
    zero = out == 0
    assert 0.28 < zero.mean() < 0.32
    _close(out[~zero], x[~zero] / 0.7)


def test_dropout_eval_and_zero_prob_are_identity(rng):
    x = normal(rng, 4, 5)
    np.testing.assert_array_equal(M.Dropout(0.5).eval()(eg.tensor(x)).numpy(), x)
    np.testing.assert_array_equal(M.Dropout(0.0)(eg.tensor(x)).numpy(), x)


def test_dropout_masks_follow_the_seed():
    drop, x = M.Dropout(0.5), eg.ones((8, 16))
    eg.random.seed(123)
    first, second = drop(x).numpy(), drop(x).numpy()
    eg.random.seed(123)
    again = drop(x).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first == 0, second == 0)


def test_dropout_rejects_bad_probability():
    with pytest.raises(ValueError):
        M.Dropout(1.0)(eg.ones(3))


# ----- attention --------------------------------------------------------------------------------
def mha_ref(mha, q, k, v, causal, batch_first):
    e, h = mha.embed_dim, mha.num_heads
    w, b = mha.in_proj_weight.numpy().astype(np.float64), mha.in_proj_bias.numpy()
    wo, bo = mha.out_proj.weight.numpy(), mha.out_proj.bias.numpy()
    if not batch_first:
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))

    def heads(t, i):
        p = t @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e]
        n, length, _ = p.shape
        return p.reshape(n, length, h, e // h).transpose(0, 2, 1, 3)

    qh, kh, vh = heads(q, 0), heads(k, 1), heads(v, 2)
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(e // h)
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, -np.inf)
    o = _softmax(scores) @ vh
    n, _, lq, _ = o.shape
    out = o.transpose(0, 2, 1, 3).reshape(n, lq, e) @ wo.T + bo
    return out if batch_first else out.transpose(1, 0, 2)


def _mha(rng, batch_first):
    mha = M.MultiHeadAttention(8, 2, batch_first=batch_first)
    mha.load_state_dict({"in_proj_bias": normal(rng, 24)}, strict=False)
    return mha


def test_multihead_attention_parameter_names():
    mha = M.MultiHeadAttention(8, 2)
    shapes = {n: p.shape for n, p in mha.named_parameters()}
    assert shapes == {"in_proj_weight": (24, 8), "in_proj_bias": (24,),
                      "out_proj.weight": (8, 8), "out_proj.bias": (8,)}
    with pytest.raises(ValueError):
        M.MultiHeadAttention(8, 3)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("is_causal", [False, True])
def test_multihead_self_attention(rng, batch_first, is_causal):
    mha = _mha(rng, batch_first)
    x = normal(rng, *((2, 5, 8) if batch_first else (5, 2, 8)))
    out, weights = mha(eg.tensor(x), is_causal=is_causal)
    assert weights is None
    assert out.shape == x.shape
    _close(out.numpy(), mha_ref(mha, x, x, x, is_causal, batch_first), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_cross_attention(rng, batch_first):
    mha = _mha(rng, batch_first)
    lead = (lambda n, length: (n, length)) if batch_first else (lambda n, length: (length, n))
    q, k, v = normal(rng, *lead(2, 3), 8), normal(rng, *lead(2, 6), 8), normal(rng, *lead(2, 6), 8)
    out, _ = mha(eg.tensor(q), eg.tensor(k), eg.tensor(v))
    assert out.shape == q.shape
    _close(out.numpy(), mha_ref(mha, q, k, v, False, batch_first), rtol=1e-4, atol=1e-5)


def test_multihead_causal_output_ignores_future_positions(rng):
    mha = _mha(rng, True)
    x = normal(rng, 1, 5, 8)
    changed = x.copy()
    changed[:, 3:] += 1.0
    a = mha(eg.tensor(x), is_causal=True)[0].numpy()
    b = mha(eg.tensor(changed), is_causal=True)[0].numpy()
    np.testing.assert_array_equal(a[:, :3], b[:, :3])
    assert not np.allclose(a[:, 3:], b[:, 3:])


# ----- parameter-free modules -------------------------------------------------------------------
def test_pooling_and_flatten_modules(rng):
    x = normal(rng, 2, 3, 4, 6)
    blocks = x.reshape(2, 3, 2, 2, 3, 2)
    _close(M.MaxPool2d(2)(eg.tensor(x)).numpy(), blocks.max(axis=(3, 5)))
    _close(M.AvgPool2d(2)(eg.tensor(x)).numpy(), blocks.mean(axis=(3, 5)))
    _close(M.AdaptiveAvgPool2d(1)(eg.tensor(x)).numpy(), x.mean(axis=(2, 3), keepdims=True))
    _close(M.AdaptiveAvgPool2d((2, 3))(eg.tensor(x)).numpy(), blocks.mean(axis=(3, 5)))
    assert M.Flatten()(eg.tensor(x)).shape == (2, 72)
    np.testing.assert_array_equal(M.Flatten(1, 2)(eg.tensor(x)).numpy(), x.reshape(2, 12, 6))


def test_sequential_forward_composes_modules(rng):
    net = M.Sequential(M.Linear(4, 5), M.ReLU(), M.Linear(5, 2))
    x = normal(rng, 3, 4).astype(np.float64)
    b0, w0, b2, w2 = (p.numpy() for p in net.parameters())
    expected = np.maximum(x @ w0.T + b0, 0) @ w2.T + b2
    _close(net(eg.tensor(x.astype(np.float32))).numpy(), expected)


def test_forward_hooks_replace_inputs_and_outputs_and_come_off():
    """MegEngine's (and PyTorch's) forward hooks; the zoo's spectral norm is a pre-hook."""
    lin = M.Linear(2, 2)
    seen = []
    pre = lin.register_forward_pre_hook(lambda m, inputs: (inputs[0] * 0,))
    post = lin.register_forward_hook(lambda m, inputs, out: seen.append(out.shape))
    y = lin(eg.ones((3, 2)))
    np.testing.assert_allclose(y.numpy(), np.broadcast_to(lin.bias.numpy(), (3, 2)))
    assert seen == [(3, 2)]
    pre.remove()
    post.remove()
    pre.remove()  # a second remove does nothing
    assert not lin._forward_pre_hooks and not lin._forward_hooks and seen == [(3, 2)]


def test_deleting_a_parameter_attribute_is_seen():
    lin = M.Linear(2, 2)
    version = lin.structure_version
    del lin.bias
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    assert lin.structure_version > version
