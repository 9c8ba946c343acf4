"""MegEngine code that failed here before it was run against real MegEngine (data types, argument
forms and initializers MegEngine accepts), each against an independent reference: float class
labels, argmax over several axes, batch_norm with float16 input and float32 parameters or out of
place, user attributes on tensors, `Tensor.set_value` (keeping its value's gradient history),
`copy.deepcopy` of a tensor, `Module.train(mode, recursive)`, `M.init`'s fan, gain and MSRA / Xavier
initializers, and `optim.LAMBFp16` against `LAMB` on float32 masters. The same programs run against
real MegEngine in tests/parity/cases_porting.py."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.core.errors import OpArgumentError
from tests.helpers import examples, randn_array

FEW = examples(4)


def test_float_labels_holding_whole_numbers_act_as_integer_labels():
    pred = randn_array(4, 3)
    for loss in (F.cross_entropy, F.nll_loss):
        want = loss(eg.tensor(pred), eg.tensor([0, 2, 1, 1])).item()
        assert loss(eg.tensor(pred), eg.tensor([0.0, 2.0, 1.0, 1.0])).item() == want
        assert loss(eg.tensor(pred), np.array([0.0, 2.0, 1.0, 1.0])).item() == want
    with pytest.raises(OpArgumentError, match="must be whole numbers; a float label holds 0.5"):
        F.cross_entropy(eg.tensor(pred), eg.tensor([0.5, 2.0, 1.0, 1.0]))


@FEW
@given(shape=st.lists(st.integers(1, 4), min_size=2, max_size=4), data=st.data())
def test_argmax_and_argmin_over_several_axes_index_the_flattened_axes(shape, data):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                              max_size=len(shape), unique_by=lambda a: a % len(shape)))
    keepdims = data.draw(st.booleans())
    x = randn_array(*shape, seed=len(axes))
    chosen = sorted(a % len(shape) for a in axes)
    kept = [d for d in range(len(shape)) if d not in chosen]
    flat = x.transpose(kept + chosen).reshape([shape[d] for d in kept] + [-1])
    for fn, ref in ((F.argmax, np.argmax), (F.argmin, np.argmin)):
        want = ref(flat, axis=-1)
        if keepdims:
            want = np.expand_dims(want, tuple(chosen))
        got = fn(eg.tensor(x), axis=tuple(axes), keepdims=keepdims).numpy()
        np.testing.assert_array_equal(got, want)


def _bn_ref(x, w, b, eps=1e-5):
    """Batch norm computed in float32, the output rounded to x's dtype."""
    xf = x.astype(jnp.float32)
    mean = xf.mean(axis=(0, 2, 3), keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    return ((xf - mean) / jnp.sqrt(var + eps) * w + b).astype(x.dtype)


def test_batch_norm_of_float16_input_with_float32_parameters():
    x = randn_array(2, 3, 4, 4, dtype=np.float16)
    w = np.linspace(0.5, 1.5, 3, dtype=np.float32).reshape(1, 3, 1, 1)
    b = np.linspace(-0.2, 0.2, 3, dtype=np.float32).reshape(1, 3, 1, 1)
    tx, tw, tb = eg.tensor(x), eg.Parameter(w), eg.Parameter(b)
    gm = GradManager().attach([tx, tw, tb])
    with gm:
        y = F.batch_norm(tx, None, None, tw, tb, training=True)
        gm.backward((y * y).sum())
    assert y.dtype == np.float16
    assert (tx.grad.dtype, tw.grad.dtype, tb.grad.dtype) == (np.float16, np.float32, np.float32)
    want, vjp = jax.vjp(jax.jit(_bn_ref), x, w, b)
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-3, atol=2e-3)
    for got, ref in zip((tx.grad, tw.grad, tb.grad), vjp(2 * want)):
        np.testing.assert_allclose(got.numpy().astype(np.float32), np.asarray(ref, np.float32),
                                   rtol=2e-2, atol=2e-2)


def test_batch_norm_out_of_place_returns_the_new_statistics_and_keeps_the_old():
    x = randn_array(4, 3, 2, 2)
    rm, rv = eg.zeros(3), eg.ones(3)
    y, mean, var = F.batch_norm(eg.tensor(x), rm, rv, training=True, momentum=0.9,
                                inplace=False)
    n = x.size // 3
    np.testing.assert_allclose(mean.numpy(), 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(var.numpy(), 0.9 + 0.1 * x.var(axis=(0, 2, 3)) * n / (n - 1),
                               rtol=1e-5)
    assert rm.numpy().tolist() == [0.0] * 3 and rv.numpy().tolist() == [1.0] * 3
    np.testing.assert_allclose(y.numpy(), F.batch_norm(eg.tensor(x), training=True).numpy())


def test_tensors_take_user_attributes_and_set_value_replaces_the_value():
    p = eg.Parameter([1.0, 2.0])
    p.grad_backup = eg.tensor([3.0])  # what MegEngine training code does
    assert p.grad_backup.item() == 3.0
    p.set_value(np.ones((2, 3)))
    assert p.shape == (2, 3) and p.dtype == np.float32 and isinstance(p, eg.Parameter)
    p.set_value(eg.tensor([1, 2], dtype="int32"))
    assert p.dtype == np.int32 and p.numpy().tolist() == [1, 2]


def test_init_fans_and_gains():
    I = M.init  # noqa: N806
    assert I.calculate_fan_in_and_fan_out(eg.zeros((5, 3))) == (3, 5)
    assert I.calculate_fan_in_and_fan_out(eg.zeros((8, 2, 3, 3))) == (18, 72)
    assert I.calculate_correct_fan(eg.zeros((8, 2, 3, 3)), "fan_out") == 72
    # grouped weights count one group, as MegEngine's; a plain 5-d Conv3d weight is not grouped
    assert I.calculate_fan_in_and_fan_out(M.Conv2d(4, 6, 3, groups=2).weight) == (18, 27)
    assert I.calculate_fan_in_and_fan_out(M.Conv3d(4, 6, 3).weight) == (108, 162)
    assert I.calculate_fan_in_and_fan_out(eg.zeros((2, 3, 2, 3, 3))) == (54, 36)
    assert I.calculate_gain("conv2d") == 1.0 and I.calculate_gain("tanh") == 5 / 3
    assert I.calculate_gain("relu") == math.sqrt(2)
    assert I.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    with pytest.raises(OpArgumentError, match="at least 2 axes"):
        I.calculate_fan_in_and_fan_out(eg.zeros(3))
    with pytest.raises(OpArgumentError, match="unknown nonlinearity 'swish'"):
        I.calculate_gain("swish")


@pytest.mark.parametrize(("name", "kwargs", "std"), [
    ("xavier_uniform_", {}, math.sqrt(2 / (200 + 100))),
    ("xavier_normal_", {"gain": 2.0}, 2 * math.sqrt(2 / (200 + 100))),
    ("msra_uniform_", {}, math.sqrt(2 / 1.0001) / math.sqrt(200)),
    ("msra_normal_", {"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(2 / 100)),
])
def test_initializers_draw_with_the_documented_spread(name, kwargs, std):
    w = eg.zeros((100, 200))
    eg.random.seed(0)
    getattr(M.init, name)(w, **kwargs)
    values = w.numpy()
    assert abs(values.std() - std) < 0.03 * std and abs(values.mean()) < 0.03 * std
    if "uniform" in name:
        assert np.abs(values).max() <= math.sqrt(3) * std * (1 + 1e-6)


def test_lamb_fp16_keeps_float32_masters_updated_as_lamb_updates_float32():
    start = randn_array(6, seed=1) + 2
    half = eg.Parameter(start.astype(np.float16))
    single = eg.Parameter(start.astype(np.float16).astype(np.float32))
    fp16 = optim.LAMBFp16([half], lr=1e-3, weight_decay=0.1)
    ref = optim.LAMB([single], lr=1e-3, weight_decay=0.1)
    for i in range(4):
        g = randn_array(6, seed=10 + i).astype(np.float16)
        half.grad, single.grad = eg.tensor(g), eg.tensor(g.astype(np.float32))
        fp16.step()
        ref.step()
    master = fp16.state[half]["param_fp32"]
    assert half.dtype == np.float16 and master.dtype == np.float32
    np.testing.assert_allclose(master.numpy(), single.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(half.numpy(), single.numpy().astype(np.float16))
    for k in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_allclose(fp16.state[half][k].numpy(), ref.state[single][k].numpy())


def test_integer_powers_are_float32_as_megengine():
    """MegEngine computes every power in floats: int ** int is float32, 3 ** -1 a third (jax
    wraps in integers: it gave 2111105451)."""
    i = eg.tensor([2, 3])
    for got in (i**2, F.pow(i, 3), 2**i, i**i, i**-1, F.pow(i, -2), eg.tensor([True]) ** 2):
        assert got.dtype == np.float32
    np.testing.assert_allclose((i**-1).numpy(), [0.5, 1 / 3])
    np.testing.assert_array_equal((i**i).numpy(), [4.0, 27.0])
    assert (i.astype("float16") ** 2).dtype == np.float16


def test_set_value_keeps_the_gradient_history_of_its_value():
    """MegEngine's `b.set_value(w * 3)` makes `b` the product: gradients through `b` reach `w`
    (the zoo's spectral norm relies on it); `detach()` cuts it."""
    w, x = eg.Parameter([1.0, 2.0]), eg.tensor([1.0, 1.0])
    b = eg.tensor([0.0, 0.0])
    gm = GradManager().attach([w])
    with gm:
        b.set_value(w * 3)
        gm.backward((b * x).sum())
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 3.0])
    w.grad = None
    with gm:
        b.set_value((w * 3).detach())
        gm.backward((b * x).sum() + (w * 0).sum())
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])


def test_deepcopy_is_a_detached_tensor_of_the_same_class():
    import copy

    from partial import partial_trace

    w = eg.Parameter([1.0, 2.0])
    w.note = "user attribute"
    gm = GradManager().attach([w])

    def step(v):
        y = w * v
        return (copy.deepcopy(y) * w).sum()  # the copy is a constant: d/dw = copy

    grads = []
    for fn in (step, partial_trace(step)):
        w.grad = None
        with gm:
            gm.backward(fn(eg.tensor([2.0, 3.0])))
        grads.append(w.grad.numpy())
    np.testing.assert_array_equal(grads[0], [2.0, 6.0])
    np.testing.assert_array_equal(grads[1], grads[0])
    c = copy.deepcopy(w)
    assert type(c) is eg.Parameter and c is not w and c.grad is None
    assert not hasattr(c, "note") and c.numpy().tolist() == [1.0, 2.0]


def test_train_calls_overridden_train_of_sub_modules_as_megengine():
    """`train(mode, recursive)` as MegEngine's: a sub-module's own `train` is called, with
    `recursive=False` where it takes it (also in tests/parity/cases_porting.py)."""
    class FrozenBN(M.Module):
        def __init__(self):
            super().__init__()
            self.bn = M.BatchNorm2d(2)

        def train(self, mode=True, recursive=True):
            super().train(mode, recursive)
            self.bn.eval()  # a model that freezes its BatchNorm when trained
            return self

    calls = []

    class TorchStyle(M.Module):
        def train(self, mode=True):  # PyTorch's signature: called without `recursive`
            calls.append(mode)
            return super().train(mode)

    frozen = FrozenBN()
    frozen.eval()
    frozen.train()
    assert frozen.training and not frozen.bn.training
    net = M.Sequential(FrozenBN(), TorchStyle(), M.Dropout(0.1))
    net.eval()
    net.train()
    # MegEngine's order: each module in `modules()` order, so the BatchNorm's own turn comes
    # after its parent's override froze it (real MegEngine 1.13 gives the same)
    assert net.training and net[0].training and net[0].bn.training and net[2].training
    assert calls == [False, True]  # PyTorch's signature is called without `recursive`
    net.train(False, recursive=False)
    assert not net.training and net[2].training
