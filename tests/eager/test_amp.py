"""`eager.amp`: the autocast policy per op class, in float16 and bfloat16, its thread-local state,
gradients reaching float32 parameters, and GradScaler's skip, backoff, growth and state dict."""

import threading

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager import amp
from eager.autodiff import GradManager

LOW = ["float16", "bfloat16"]


def _inputs(rng):
    x = eg.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    w = eg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    return x, w


def _low_ops(x, w):
    q = x.reshape(2, 1, 3, 4)
    return {
        "matmul": F.matmul(x, w.T),
        "linear": F.linear(x, w),
        "attention": F.scaled_dot_product_attention(q, q, q),
        "einsum": F.einsum("bij,kj->bik", x, w),
    }


def _float32_ops(x):
    h = x.astype("float16")  # low precision inputs, as a matmul inside autocast leaves them
    label = eg.tensor(np.array([0, 2], np.int32))
    return {
        "sum": h.sum(), "mean": F.mean(h, axis=1), "var": F.var(h),
        "logsumexp": F.logsumexp(h, axis=2), "softmax": F.softmax(h, axis=-1),
        "log_softmax": F.log_softmax(h, axis=-1),
        "layer_norm": F.layer_norm(h, (4,)),
        "batch_norm": F.batch_norm(h, training=True),
        "group_norm": F.group_norm(h.reshape(2, 4, 3), 2),
        "cross_entropy": F.cross_entropy(h[:, 0, :], label),
        "mse_loss": F.mse_loss(h, x),
    }


@pytest.mark.parametrize("low", LOW)
def test_each_op_class_computes_in_its_type_inside_autocast(rng, low):
    x, w = _inputs(rng)
    with amp.autocast(low_prec_dtype=low):
        assert amp.autocast_dtype() == low
        for name, y in _low_ops(x, w).items():
            assert y.dtype.name == low, name
        for name, y in _float32_ops(x).items():
            assert y.dtype.name == "float32", name
        assert (x + 1).dtype.name == "float32"  # ops outside the table keep their input type
        assert F.relu(F.matmul(x, w.T)).dtype.name == low
    want = F.matmul(x, w.T).numpy()
    with amp.autocast(low_prec_dtype=low):
        got = F.matmul(x, w.T).astype("float32").numpy()
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2)


def test_autocast_off_restores_and_nests(rng):
    x, w = _inputs(rng)
    assert amp.autocast_dtype() is None
    with amp.autocast():
        with amp.autocast(enabled=False):
            assert amp.autocast_dtype() is None
            assert F.linear(x, w).dtype.name == "float32"
        with amp.autocast(low_prec_dtype="bfloat16"):
            assert F.linear(x, w).dtype.name == "bfloat16"
        assert F.linear(x, w).dtype.name == "float16"
    assert amp.autocast_dtype() is None
    assert F.linear(x, w).dtype.name == "float32"
    assert F.softmax(x.astype("float16"), axis=-1).dtype.name == "float16"  # no policy
    with pytest.raises(ValueError, match="low_prec_dtype"):
        amp.autocast(low_prec_dtype="int8")
    with pytest.raises(ValueError, match="high_prec_dtype"):
        amp.autocast(high_prec_dtype="float64")
    with amp.autocast(True, "bfloat16", "float32"):  # MegEngine 1.13's positional order
        assert F.linear(x, w).dtype.name == "bfloat16"
    with amp.autocast(low_precision_type="bfloat16"):  # the name of earlier releases
        assert F.linear(x, w).dtype.name == "bfloat16"


def test_grad_scaler_defaults_are_megengines():
    scaler = amp.GradScaler()
    assert scaler.scale_factor == 16.0
    assert (scaler.growth_factor, scaler.backoff_factor, scaler.growth_interval) == (2.0, 0.5, 2000)


def test_autocast_as_a_decorator_and_an_error_inside_restores(rng):
    x, w = _inputs(rng)

    @amp.autocast(low_prec_dtype="bfloat16")
    def f(a):
        return F.linear(a, w)

    assert f(x).dtype.name == "bfloat16"
    assert F.linear(x, w).dtype.name == "float32"
    with pytest.raises(RuntimeError), amp.autocast():
        raise RuntimeError
    assert amp.autocast_dtype() is None


def test_autocast_is_thread_local(rng):
    x, w = _inputs(rng)
    entered, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        entered.wait()
        seen["dtype"] = F.linear(x, w).dtype.name
        seen["state"] = amp.autocast_dtype()
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with amp.autocast():
        entered.set()
        done.wait(10)
        assert F.linear(x, w).dtype.name == "float16"
    t.join()
    assert seen == {"dtype": "float32", "state": None}


@pytest.mark.parametrize("low", LOW)
def test_gradients_reach_float32_parameters_in_float32(rng, low):
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 3))
    gm = GradManager().attach(net.parameters())
    x = eg.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    y = eg.tensor(np.arange(6, dtype=np.int32) % 3)
    with gm, amp.autocast(low_prec_dtype=low):
        loss = F.cross_entropy(net(x), y)
        assert loss.dtype.name == "float32"
        gm.backward(loss)
    amp_grads = [p.grad.numpy() for p in net.parameters()]
    for p in net.parameters():
        assert p.dtype.name == "float32" and p.grad.dtype.name == "float32"
        p.grad = None
    with gm:
        gm.backward(F.cross_entropy(net(x), y))
    for g, p in zip(amp_grads, net.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=5e-2, atol=2e-2)


def _setup(scale=2.0**10, **kw):
    w = eg.Parameter(np.array([1.0, -2.0, 3.0], np.float32))
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    return w, opt, GradManager().attach([w]), amp.GradScaler(init_scale=scale, **kw)


def _step(w, opt, gm, scaler, poison=1.0):
    with gm:
        scaler.backward(gm, (w * w).sum() * poison)
    opt.step().clear_grad()


def test_scaler_gradients_are_unscaled():
    w, opt, gm, scaler = _setup()
    with gm:
        scaler.backward(gm, (w * w).sum(), update_scale=False)
    np.testing.assert_allclose(w.grad.numpy(), [2.0, -4.0, 6.0])
    with gm:
        scaler.backward(gm, (w * w).sum(), unscale_grad=False)  # accumulates, scaled
    np.testing.assert_allclose(w.grad.numpy(), np.array([2.0, -4.0, 6.0]) * (1 + 2.0**10))


def test_scaler_skips_the_step_and_backs_off_on_inf():
    w, opt, gm, scaler = _setup()
    _step(w, opt, gm, scaler)
    before = (w.numpy(), opt.state[w]["momentum_buffer"].numpy())
    with gm:
        scaler.backward(gm, (w * w).sum() * float("inf"))
    assert w.grad is None
    opt.step().clear_grad()  # skipped: no parameter has a gradient
    np.testing.assert_array_equal(w.numpy(), before[0])
    np.testing.assert_array_equal(opt.state[w]["momentum_buffer"].numpy(), before[1])
    assert scaler.scale_factor == 2.0**9
    _step(w, opt, gm, scaler, poison=float("nan"))
    assert scaler.scale_factor == 2.0**8
    _step(w, opt, gm, scaler)
    assert not np.array_equal(w.numpy(), before[0]) and scaler.scale_factor == 2.0**8


def test_scaler_grows_after_growth_interval_finite_steps():
    w, opt, gm, scaler = _setup(scale=4.0, growth_interval=3, growth_factor=4.0)
    for _ in range(2):
        _step(w, opt, gm, scaler)
    assert scaler.scale_factor == 4.0
    _step(w, opt, gm, scaler)
    assert scaler.scale_factor == 16.0
    _step(w, opt, gm, scaler, poison=float("inf"))  # an overflow restarts the count
    _step(w, opt, gm, scaler)
    _step(w, opt, gm, scaler)
    assert scaler.scale_factor == 8.0
    _step(w, opt, gm, scaler)
    assert scaler.scale_factor == 32.0
    scaler.update(new_scale=3.0)
    assert scaler.scale_factor == 3.0


def test_scaler_state_dict_round_trips_through_a_checkpoint(tmp_path):
    w, opt, gm, scaler = _setup(scale=64.0, growth_interval=5, backoff_factor=0.25)
    for poison in (1.0, float("inf"), 1.0):
        _step(w, opt, gm, scaler, poison)
    state = scaler.state_dict()
    assert state == {"scale_factor": 16.0, "growth_factor": 2.0, "backoff_factor": 0.25,
                     "growth_interval": 5, "_growth_tracker": 1}
    eg.save({"scaler": state}, tmp_path / "ckpt.pkl")
    other = amp.GradScaler()
    other.load_state_dict(eg.load(tmp_path / "ckpt.pkl")["scaler"])
    assert other.state_dict() == state
    with pytest.raises(ValueError, match="growth_factor"):
        amp.GradScaler(growth_factor=0.5)


@pytest.mark.parametrize("low", LOW)
def test_convolutions_compute_in_the_low_type_and_their_weights_get_float32_grads(rng, low):
    x = eg.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    w = eg.Parameter(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    wt = eg.Parameter(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    gm = GradManager().attach([w, wt])
    with gm, amp.autocast(low_prec_dtype=low):
        y = F.conv2d(x, w, padding=1)
        z = F.conv_transpose2d(y, wt, stride=2)
        assert y.dtype.name == low and z.dtype.name == low
        gm.backward(z.sum())
    assert w.grad.dtype.name == "float32" and wt.grad.dtype.name == "float32"
