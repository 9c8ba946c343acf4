"""Op-level tests of the optimizer updates Adagrad, Adadelta and LAMB, of the gradient
clipping ops and of the gradient layout op (ZeRO-2), each against an independent jnp reference
(values; for the clipping ops also gradients through `jax.vjp`). The optimizers built on them
are tested in tests/eager/test_optimizers.py, the clipping functions in
tests/eager/test_grad_clipping.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import eager as eg

from .op_check import check_op


def _arrays(rng, *shapes, positive=False):
    draw = (lambda s: rng.uniform(0.1, 1.0, s)) if positive else rng.standard_normal
    return [np.asarray(draw(s), np.float32) for s in shapes]


# ----- optimizer updates ------------------------------------------------------------------------
def test_adagrad_update():
    rng = np.random.default_rng(1)
    p, g = _arrays(rng, (5,), (5,))
    (sq,) = _arrays(rng, (5,), positive=True)
    lr, lr_decay, eps, wd = 0.1, 0.5, 1e-10, 0.01
    gg = g + wd * p
    sq2 = sq + gg * gg
    new_p = p - lr / (1 + 2 * lr_decay) * gg / np.sqrt(sq2 + eps)  # the third step: t - 1 = 2
    check_op("adagrad_update", [p, g, sq, np.array(2, np.int32), lr, lr_decay, eps, wd],
             lambda *a: (jnp.asarray(new_p), jnp.asarray(sq2), jnp.asarray(3)), {"n": 1})


def test_adadelta_update():
    rng = np.random.default_rng(2)
    p, g = _arrays(rng, (2, 3), (2, 3))
    sq, acc = _arrays(rng, (2, 3), (2, 3), positive=True)
    lr, rho, eps, wd = 0.5, 0.8, 1e-6, 0.1
    gg = g + wd * p
    sq2 = rho * sq + (1 - rho) * gg * gg
    delta = np.sqrt(acc + eps) / np.sqrt(sq2 + eps) * gg
    acc2 = rho * acc + (1 - rho) * delta * delta
    check_op("adadelta_update", [p, g, sq, acc, np.array(4, np.int32), lr, rho, eps, wd],
             lambda *a: (jnp.asarray(p - lr * delta), jnp.asarray(sq2), jnp.asarray(acc2),
                         jnp.asarray(5)), {"n": 1})


def _lamb_ref(p, g, m, v, t, lr, b1, b2, eps, wd, bias_correction, always_adapt):
    m2, v2 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
    r = m2 / c1 / (np.sqrt(v2 / c2) + eps) + wd * p
    pn, rn = np.sqrt(np.sum(p * p)), np.sqrt(np.sum(r * r))
    trust = pn / rn if (always_adapt or wd > 0) and pn > 0 and rn > 0 else 1.0
    return p - lr * trust * r, m2, v2


@pytest.mark.parametrize("wd, bias_correction, always_adapt", [
    (0.0, True, False), (0.0, True, True), (0.1, True, False), (0.1, False, False)])
def test_lamb_update(wd, bias_correction, always_adapt):
    rng = np.random.default_rng(3)
    p, g, m = _arrays(rng, (4, 3), (4, 3), (4, 3))
    (v,) = _arrays(rng, (4, 3), positive=True)
    hyper = (0.01, 0.9, 0.99, 1e-8, wd)
    new_p, m2, v2 = _lamb_ref(p, g, m, v, 3, *hyper, bias_correction, always_adapt)
    check_op("lamb_update", [p, g, m, v, np.array(2, np.int32), *hyper],
             lambda *a: (jnp.asarray(new_p), jnp.asarray(m2), jnp.asarray(v2), jnp.asarray(3)),
             {"n": 1, "bias_correction": bias_correction, "always_adapt": always_adapt})


def test_lamb_update_of_a_zero_parameter_takes_the_plain_step():
    """|p| = 0: the trust ratio is 1 (not 0, which would freeze a zero-initialized bias)."""
    g = np.full(3, 2.0, np.float32)
    zero = np.zeros(3, np.float32)
    new_p, m2, v2 = _lamb_ref(zero, g, zero, zero, 1, 0.1, 0.9, 0.999, 1e-8, 0.1, True, False)
    assert np.all(new_p != 0)
    check_op("lamb_update", [zero, g, zero, zero, np.array(0, np.int32), 0.1, 0.9, 0.999, 1e-8,
                             0.1],
             lambda *a: (jnp.asarray(new_p), jnp.asarray(m2), jnp.asarray(v2), jnp.asarray(1)),
             {"n": 1, "bias_correction": True, "always_adapt": False})


@pytest.mark.parametrize("name, state, hyper, attrs", [
    ("adagrad_update", 1, (0.1, 0.01, 1e-10, 0.01), {}),
    ("adadelta_update", 2, (1.0, 0.9, 1e-6, 0.01), {}),
    ("lamb_update", 2, (0.01, 0.9, 0.99, 1e-8, 0.01),
     {"bias_correction": True, "always_adapt": False}),
])
def test_updates_of_a_group_match_one_parameter_at_a_time(name, state, hyper, attrs):
    rng = np.random.default_rng(4)
    shapes = [(3, 4), (4,), ()]
    lists = [_arrays(rng, *shapes) for _ in range(2)]  # parameters, gradients
    lists += [_arrays(rng, *shapes, positive=True) for _ in range(state)]
    lists.append([np.array(i, np.int32) for i in range(3)])
    flat = [a for lst in lists for a in lst]
    # fresh tensors per call: an update consumes (donates) its parameter and state buffers
    grouped = eg.apply(eg.OPS[name], *map(eg.tensor, flat), *hyper, n=3, **attrs)
    outs = len(grouped) // 3
    for i in range(3):
        single = eg.apply(eg.OPS[name], *(eg.tensor(lst[i]) for lst in lists), *hyper, n=1,
                          **attrs)
        for k in range(outs):
            np.testing.assert_array_equal(grouped[3 * k + i].numpy(), single[k].numpy())


# ----- gradient clipping ------------------------------------------------------------------------
def _total_norm(grads, ord):
    flat = jnp.concatenate([g.ravel() for g in grads])
    if ord == np.inf:
        return jnp.max(jnp.abs(flat))
    return jnp.sum(jnp.abs(flat) ** ord) ** (1 / ord)


def _clip_norm_ref(*args, ord):
    grads, max_norm = args[:-1], args[-1]
    total = _total_norm(grads, ord)
    scale = jnp.minimum(max_norm / (total + 1e-6), 1.0)
    return (*[g * scale for g in grads], total)


GRAD_SHAPES = [(3, 4), (), (2, 1, 3)]


@pytest.mark.parametrize("ord, max_norm", [(2.0, 0.5), (1.0, 0.5), (3.0, 0.5), (np.inf, 0.5),
                                           (2.0, 1e3)])
def test_clip_grad_norm_op(ord, max_norm):
    grads = _arrays(np.random.default_rng(5), *GRAD_SHAPES)
    check_op("clip_grad_norm", [*grads, max_norm],
             lambda *a: _clip_norm_ref(*a, ord=ord), {"n": len(grads), "ord": ord},
             rtol=2e-5, atol=1e-6)


def test_clip_grad_norm_op_keeps_low_precision_dtypes():
    g16 = np.array([3.0, 4.0], np.float16)
    g32 = np.array([12.0], np.float32)
    a, b, total = eg.apply(eg.OPS["clip_grad_norm"], eg.tensor(g16), eg.tensor(g32), 1.0, n=2,
                           ord=2.0)
    assert (a.dtype, b.dtype, total.dtype) == (np.float16, np.float32, np.float32)
    np.testing.assert_allclose(total.numpy(), 13.0)
    np.testing.assert_allclose(a.numpy(), [3 / 13, 4 / 13], rtol=1e-3)


@pytest.mark.parametrize("lower, upper", [(-0.5, 0.8), (0.0, 0.0)])
def test_clip_grad_value_op(lower, upper):
    grads = _arrays(np.random.default_rng(6), *GRAD_SHAPES)
    check_op("clip_grad_value", [*grads, lower, upper],
             lambda *a: tuple(jnp.minimum(jnp.maximum(g, lower), upper) for g in a[:-2]),
             {"n": len(grads)})


def test_gradient_layout_is_the_identity_laid_out():
    # one device here; the 4-device behaviour is in tests/distributed/test_sharded.py
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("data",)),
                             PartitionSpec(None, "data"))
    (x,) = _arrays(np.random.default_rng(7), (4, 3))
    check_op("gradient_layout", [x], lambda g: g, {"sharding": sharding})
    out = eg.apply(eg.OPS["gradient_layout"], eg.tensor(x), sharding=sharding)
    assert out.sharding.is_equivalent_to(sharding, 2)


# Every op this module registers has its value (and, for the clipping ops, gradient) checked
# above; the optimizers and clipping functions on top are tested in tests/eager/test_optimizers.py
# and tests/eager/test_grad_clipping.py.
COVERED = {"adagrad_update", "adadelta_update", "lamb_update", "clip_grad_norm",
           "clip_grad_value", "gradient_layout"}
