"""`megengine.module`: parameter naming, state dicts (including MegEngine's (1, C, 1, 1)
BatchNorm statistics), training flags and BatchNorm running statistics."""

from collections import OrderedDict

import numpy as np
import pytest

import eager as mge
import eager.functional as F
import eager.module as M


class Block(M.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = M.Conv2d(1, 2, 1)
        self.bn1 = M.BatchNorm2d(2)
        self.layers = [M.Linear(2, 3), M.Linear(3, 3)]   # a plain list of modules
        self.head = M.Sequential(M.Linear(3, 1), M.ReLU())

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x))).mean(axis=(2, 3))
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def test_state_dict_names_are_dotted_attribute_paths():
    keys = set(Block().state_dict())
    assert keys == {
        "conv1.weight", "conv1.bias",
        "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
        "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
        "head.0.weight", "head.0.bias",
    }


def test_state_dict_values_are_numpy_and_round_trip():
    a, b = Block(), Block()
    state = a.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    b.load_state_dict(state)
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy(), err_msg=name)
    x = mge.tensor(np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32))
    a.eval()
    b.eval()
    np.testing.assert_allclose(a(x).numpy(), b(x).numpy())


def test_parameters_buffers_and_children():
    net = Block()
    assert len(net.parameters()) == 10
    assert {n for n, _ in net.named_buffers()} == {"bn1.running_mean", "bn1.running_var"}
    assert isinstance(net.parameters()[0], mge.Parameter)
    assert {type(m).__name__ for m in net.modules()} >= {"Block", "Conv2d", "Linear", "ReLU"}
    assert len(list(net.head.children())) == 2


def test_weight_shapes():
    net = Block()
    assert net.layers[0].weight.shape == (3, 2)          # Linear: (out, in)
    assert net.conv1.weight.shape == (2, 1, 1, 1)        # Conv2d: (out, in, kh, kw)
    # grouped: (groups, out / groups, in / groups, kh, kw), as MegEngine stores it
    assert M.Conv2d(2, 2, 1, groups=2, bias=False).weight.shape == (2, 1, 1, 1, 1)
    assert M.ConvTranspose2d(4, 6, 3, groups=2).weight.shape == (2, 2, 3, 3, 3)
    assert M.PReLU().weight.shape == (1,) and M.PReLU(3).weight.shape == (1, 3, 1, 1)


def test_load_megengine_batchnorm_statistics_of_shape_1c11():
    bn = M.BatchNorm2d(2)
    bn.load_state_dict({
        "weight": np.full((1, 2, 1, 1), 2.0, np.float32),
        "bias": np.full((1, 2, 1, 1), 0.5, np.float32),
        "running_mean": np.array([1.0, -1.0], np.float32).reshape(1, 2, 1, 1),
        "running_var": np.array([4.0, 0.25], np.float32).reshape(1, 2, 1, 1),
    })
    np.testing.assert_array_equal(bn.running_mean.numpy().ravel(), [1.0, -1.0])
    bn.eval()
    x = np.ones((1, 2, 1, 1), np.float32)
    out = bn(mge.tensor(x)).numpy().ravel()
    ref = 2.0 * (1.0 - np.array([1.0, -1.0])) / np.sqrt(np.array([4.0, 0.25]) + 1e-5) + 0.5
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_load_megengine_conv_bias_of_shape_1c11():
    conv = M.Conv2d(1, 2, 1)
    conv.load_state_dict({"weight": np.ones((2, 1, 1, 1), np.float32),
                          "bias": np.array([3.0, 4.0], np.float32).reshape(1, 2, 1, 1)})
    out = conv(mge.tensor(np.ones((1, 1, 1, 1), np.float32))).numpy().ravel()
    np.testing.assert_array_equal(out, [4.0, 5.0])


def test_load_state_dict_strict():
    lin = M.Linear(2, 1)
    state = lin.state_dict()
    with pytest.raises(KeyError, match="bias"):
        lin.load_state_dict({"weight": state["weight"]})
    with pytest.raises(KeyError, match="extra"):
        lin.load_state_dict({**state, "extra": np.zeros(1)})
    lin.load_state_dict({"weight": np.full((1, 2), 7.0, np.float32)}, strict=False)
    np.testing.assert_array_equal(lin.weight.numpy(), [[7.0, 7.0]])
    with pytest.raises(ValueError):
        lin.load_state_dict({**state, "weight": np.zeros((3,), np.float32)})


def test_batchnorm_running_statistics_use_megengine_momentum():
    bn = M.BatchNorm2d(2, momentum=0.9)
    a = np.random.default_rng(3).standard_normal((4, 2, 3, 3)).astype(np.float32)
    bn(mge.tensor(a))
    bn(mge.tensor(a))
    mean, unbiased = a.mean(axis=(0, 2, 3)), a.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy().ravel(), (1 - 0.81) * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy().ravel(), 0.81 + 0.19 * unbiased, rtol=1e-5)


def test_train_and_eval():
    net = M.Sequential(M.Linear(4, 4), M.Dropout(0.5), M.BatchNorm1d(4))
    assert net.training and all(m.training for m in net.modules())
    net.eval()
    assert not net.training and not any(m.training for m in net.modules())
    x = mge.tensor(np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(net[1](x).numpy(), x.numpy())   # dropout off
    before = net[2].running_mean.numpy().copy()
    net(x)
    np.testing.assert_array_equal(net[2].running_mean.numpy(), before)   # stats frozen
    net.train()
    assert net[1].training


def test_sequential_from_ordered_dict_names_children():
    net = M.Sequential(OrderedDict([("fc", M.Linear(2, 2)), ("act", M.ReLU())]))
    assert set(net.state_dict()) == {"fc.weight", "fc.bias"}
    assert net.fc is net[0]


def test_linear_computes_x_wt_plus_b():
    lin = M.Linear(3, 2)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    np.testing.assert_allclose(lin(mge.tensor(x)).numpy(), x @ w.T + b, rtol=1e-5)


def test_zero_grad_clears_parameter_grads():
    lin = M.Linear(2, 1)
    for p in lin.parameters():
        p.grad = mge.tensor(np.ones(p.shape, np.float32))
    lin.zero_grad()
    for p in lin.parameters():
        assert p.grad is None or not p.grad.numpy().any()


def test_batchnorm_built_without_statistics_cannot_start_tracking_later():
    """MegEngine refuses it too; silently tracking nothing hid the mistake."""
    from eager.core.errors import OpArgumentError

    bn = M.BatchNorm2d(3, track_running_stats=False)
    x = mge.tensor(np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32))
    bn(x)
    bn.track_running_stats = True
    with pytest.raises(OpArgumentError, match="built with track_running_stats=False"):
        bn(x)
