"""Tensor construction, dtype rules, operators, methods, value reads, interop, devices,
creation functions, the RNG and the capture hook points."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
from eager import hooks


@pytest.mark.parametrize("data, dtype", [
    (1.5, np.float32), (3, np.int32), (True, np.bool_), ([[1.0, 2.0]], np.float32),
    ([1, 2], np.int32), (np.arange(3.0), np.float32), (np.arange(3, dtype=np.int64), np.int32),
    (np.ones(2, np.float16), np.float16), (np.array([True]), np.bool_),
])
def test_construction_dtype_rules(data, dtype):
    t = eg.tensor(data)
    assert t.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype))


def test_construction_from_jax_array_and_tensor_shares_storage():
    a = jnp.arange(4.0)
    t = eg.tensor(a)  # committed to the device (Note [committed arrays]), not copied
    assert eg.read(t).unsafe_buffer_pointer() == a.unsafe_buffer_pointer()
    assert eg.read(eg.tensor(eg.read(t))) is eg.read(t)
    u = eg.Tensor(t)
    assert eg.read(u) is eg.read(t) and u._node is None


def test_construction_with_dtype_and_device():
    t = eg.tensor([1, 2], dtype="float16", device="cpu0")
    assert t.dtype == np.float16 and t.device == "cpu0"
    assert eg.Parameter([1.0]).dtype == np.float32


def test_construction_from_an_unsupported_object_raises():
    with pytest.raises(TypeError, match="cannot make a tensor from object"):
        eg.tensor(object())


def test_python_scalars_do_not_upcast_float32_or_float16():
    assert (eg.tensor([1.0]) * 2.5).dtype == np.float32
    assert (3 + eg.tensor([1.0], dtype="float16")).dtype == np.float16
    assert (eg.tensor([1.0]) + np.float32(2)).dtype == np.float32


def test_properties():
    t = eg.zeros((2, 3, 4))
    assert t.shape == (2, 3, 4) and isinstance(t.shape, tuple)
    assert t.ndim == 3 and t.size == 24 and t.dtype == np.float32
    assert t.device == eg.get_default_device()
    assert len(t) == 2
    assert [s.shape for s in t] == [(3, 4), (3, 4)]


def test_operators_against_numpy(rng):
    a = rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2, (4,)).astype(np.float32)
    ta, tb = eg.tensor(a), eg.tensor(b)
    cases = {
        "add": (ta + tb, a + b), "radd": (2 + ta, 2 + a), "sub": (ta - tb, a - b),
        "rsub": (1 - ta, 1 - a), "mul": (ta * tb, a * b), "rmul": (3 * ta, 3 * a),
        "div": (ta / tb, a / b), "rdiv": (1 / ta, 1 / a), "floordiv": (ta // 0.3, a // 0.3),
        "rfloordiv": (5 // ta, 5 // a), "mod": (ta % 0.7, a % 0.7), "rmod": (5 % ta, 5 % a),
        "pow": (ta**tb, a**b), "rpow": (2**ta, 2**a), "neg": (-ta, -a), "pos": (+ta, a),
        "abs": (abs(ta - 1), abs(a - 1)), "abs_method": ((ta - 1).abs(), abs(a - 1)),
        "matmul": (ta @ tb, a @ b), "rmatmul": (b[:3] @ ta, b[:3] @ a),
        "numpy_left": (b + ta, b + a),
    }
    for name, (got, want) in cases.items():
        assert isinstance(got, eg.Tensor), name
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, err_msg=name)


def test_comparison_and_bitwise_operators():
    a, b = eg.tensor([1, 2, 3]), eg.tensor([3, 2, 1])
    for got, want in [(a == b, [0, 1, 0]), (a != b, [1, 0, 1]), (a < b, [1, 0, 0]),
                      (a <= b, [1, 1, 0]), (a > 2, [0, 0, 1]), (a >= 2, [0, 1, 1]),
                      (a & b, [1, 2, 1]), (a | b, [3, 2, 3]), (a ^ b, [2, 0, 2]),
                      (~(a > 1), [1, 0, 0]), ((a > 1) & (b > 1), [0, 1, 0])]:
        np.testing.assert_array_equal(got.numpy().astype(int), want)
    assert {a, b} == {a, b}  # hashable by identity despite elementwise ==


def test_methods(rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    t = eg.tensor(x)
    np.testing.assert_allclose(t.reshape(6, 4).numpy(), x.reshape(6, 4))
    np.testing.assert_allclose(t.reshape((4, -1)).numpy(), x.reshape(4, -1))
    np.testing.assert_allclose(t.transpose(2, 0, 1).numpy(), x.transpose(2, 0, 1))
    np.testing.assert_allclose(t.transpose().numpy(), x.T)
    np.testing.assert_allclose(t.T.numpy(), x.T)
    np.testing.assert_allclose(t.flatten().numpy(), x.ravel())
    np.testing.assert_allclose(t.flatten(1).numpy(), x.reshape(2, 12))
    for name in ("sum", "mean", "max", "min", "prod"):
        np.testing.assert_allclose(getattr(t, name)().numpy(), getattr(x, name)(), rtol=1e-5)
        np.testing.assert_allclose(getattr(t, name)(axis=1, keepdims=True).numpy(),
                                   getattr(x, name)(axis=1, keepdims=True), rtol=1e-5)
        np.testing.assert_allclose(getattr(t, name)(axis=(0, 2)).numpy(),
                                   getattr(x, name)(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_array_equal(t.argmax(1).numpy(), x.argmax(1))
    np.testing.assert_array_equal(t.argmin().numpy(), x.argmin())
    assert t.astype("int32").dtype == np.int32


def test_value_reads():
    t = eg.tensor([[2.5]])
    assert t.item() == 2.5 and float(t) == 2.5 and int(t) == 2 and bool(t)
    assert list(range(10))[eg.tensor(3)] == 3
    arr = t.numpy()
    arr[0, 0] = 7.0  # a writable copy
    assert t.item() == 2.5
    with pytest.raises(ValueError, match=r"\.item\(\) needs a one-element tensor"):
        eg.tensor([1.0, 2.0]).item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(eg.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="integer tensors"):
        list(range(3))[eg.tensor(1.0)]


def test_grad_slot_validation():
    t = eg.Parameter([1.0, 2.0])
    t.grad = eg.tensor([0.5, 0.5])
    assert t.grad.shape == (2,)
    t.grad = None
    with pytest.raises(TypeError, match="Tensor or None"):
        t.grad = np.ones(2)
    with pytest.raises(ValueError, match="shape"):
        t.grad = eg.ones(3)


def test_detach_has_same_value_and_no_history():
    w = eg.Parameter([1.0])
    gm = eg.GradManager().attach([w])
    with gm:
        y = w * 2.0
        d = y.detach()
        assert y._node is not None and d._node is None
        np.testing.assert_array_equal(d.numpy(), y.numpy())
        gm.backward(y)


def test_interop_numpy_jax_dlpack():
    t = eg.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(t), [1, 2, 3])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert jnp.asarray(t) is eg.read(t)  # __jax_array__: no copy
    if t.device.startswith("cpu"):  # numpy takes host memory only
        np.testing.assert_array_equal(np.from_dlpack(t), [1, 2, 3])
    back = eg.from_dlpack(np.arange(4, dtype=np.float32))
    assert isinstance(back, eg.Tensor) and back.numpy().tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(eg.from_dlpack(t).numpy(), [1, 2, 3])


def test_repr_shows_value_dtype_and_device():
    r = repr(eg.tensor([1.0, 2.0]))
    assert r.startswith("Tensor([1., 2.]") and "float32" in r
    assert f"device={eg.get_default_device()}" in r


def test_devices():
    assert eg.get_default_device() == ("cpu0" if jax.default_backend() == "cpu" else "gpu0")
    eg.set_default_device("cpu0")
    try:
        assert eg.zeros(2).device == "cpu0"
        assert eg.tensor([1.0]).to("cpu0").device == "cpu0"
    finally:
        eg.set_default_device(None)
    with pytest.raises(eg.DeviceError, match="no device 'gpu7'"):
        eg.tensor([1.0], device="gpu7")


def test_creation_functions():
    assert eg.zeros((2, 3)).numpy().tolist() == [[0.0] * 3] * 2
    assert eg.ones(2, dtype="int32").dtype == np.int32
    assert eg.full((2,), 7).dtype == np.int32 and eg.full((2,), 7.0).numpy().tolist() == [7, 7]
    assert eg.full((1,), True).dtype == np.bool_
    a = eg.arange(5)
    assert a.dtype == np.float32 and a.numpy().tolist() == [0, 1, 2, 3, 4]
    assert eg.arange(1, 7, 2, dtype="int32").numpy().tolist() == [1, 3, 5]
    np.testing.assert_array_equal(eg.eye(3, 2).numpy(), np.eye(3, 2))
    t = eg.tensor([[1, 2]], dtype="float16")
    assert eg.zeros_like(t).dtype == np.float16 and eg.ones_like(t).numpy().tolist() == [[1, 1]]
    assert eg.full_like(t, 3).numpy().tolist() == [[3, 3]]


# ----- RNG ------------------------------------------------------------------------------------
def test_seed_makes_draws_reproducible_and_successive_draws_differ():
    eg.random.seed(42)
    a, b = eg.random.normal(size=(5,)), eg.random.uniform(size=(5,))
    eg.random.seed(42)
    np.testing.assert_array_equal(eg.random.normal(size=(5,)).numpy(), a.numpy())
    np.testing.assert_array_equal(eg.random.uniform(size=(5,)).numpy(), b.numpy())
    assert not np.array_equal(eg.random.normal(size=(5,)).numpy(), a.numpy())


def test_random_distributions():
    n = eg.random.normal(1.0, 2.0, size=(20000,)).numpy()
    assert abs(n.mean() - 1.0) < 0.06 and abs(n.std() - 2.0) < 0.06
    u = eg.random.uniform(-1.0, 3.0, size=(20000,)).numpy()
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    p = eg.random.permutation(100).numpy()
    assert sorted(p.tolist()) == list(range(100)) and p.dtype == np.int32


def test_every_draw_advances_the_framework_key_by_one_split():
    eg.random.seed(7)
    key0 = eg.random.get_state().numpy()
    x = eg.random.normal(size=(3,))
    nxt, sub = jax.random.split(jax.random.wrap_key_data(jnp.asarray(key0)))
    np.testing.assert_array_equal(eg.random.get_state().numpy(), jax.random.key_data(nxt))
    np.testing.assert_array_equal(x.numpy(), jax.random.normal(sub, (3,)))


def test_dropout_masks_are_bit_identical_for_the_same_seed():
    x = eg.ones((64, 64))
    eg.random.seed(3)
    a = F.dropout(x, 0.5).numpy()
    eg.random.seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), a)
    assert set(np.unique(a)) == {0.0, 2.0}
    np.testing.assert_array_equal(F.dropout(x, 0.5, training=False).numpy(), x.numpy())


# ----- hooks ----------------------------------------------------------------------------------
class Recorder(hooks.CaptureHooks):
    def __init__(self):
        self.events = []

    def read(self, tensor):
        self.events.append("read")
        return super().read(tensor)

    def rebind(self, tensor, value):
        self.events.append("rebind")

    def value_read(self, tensor, what):
        self.events.append(f"value_read {what}")

    def created(self, tensor):
        self.events.append("created")

    def module_call(self, module):
        self.events.append(f"call {type(module).__name__}")

    def hyper(self, optimizer, group, key, value):
        self.events.append(f"hyper {key}")
        return value


def test_capture_hooks_see_reads_rebinds_values_modules_and_hyper_parameters():
    import eager.module as M
    import eager.optimizer as optim

    net = M.Linear(2, 1)
    opt = optim.SGD(net.parameters(), lr=0.1)
    x = eg.ones((1, 2))
    with hooks.capturing(Recorder()) as rec:
        y = net(x)
        y.item()
        x[0, 0] = 5.0
        net.weight.grad = eg.ones((1, 2))
        opt.step()
    assert hooks.current() is None
    ev = rec.events
    assert ev[0] == "call Linear" and ev[1:4] == ["read"] * 3 and ev[4] == "created"
    assert "value_read .item()" in ev and "rebind" in ev
    assert "hyper lr" in ev and "hyper weight_decay" in ev
