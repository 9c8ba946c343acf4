"""Gradient clipping (`clip_grad_norm` in every norm, `clip_grad_value`, and PyTorch's spellings
with a trailing underscore): the clipped gradients against numpy, gradients held elsewhere see the
clip, missing gradients are skipped, and bad arguments raise naming the function. Clipping inside
`xla_trace` is in test_optimizers_in_xla_trace.py."""

import math

import numpy as np
import pytest

import eager as eg
import eager.optimizer as optim
from eager.core.errors import OpArgumentError, OpTypeError


def _with_grads(rng, shapes=((3,), (2, 2), (4,))):
    params = [eg.Parameter(np.zeros(s, np.float32)) for s in shapes]
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    for p, g in zip(params, grads):
        p.grad = eg.tensor(g)
    return params, grads


@pytest.mark.parametrize("ord, ref", [
    (2.0, lambda f: np.sqrt(np.sum(f * f))), (1, lambda f: np.sum(np.abs(f))),
    (3.0, lambda f: np.sum(np.abs(f) ** 3) ** (1 / 3)), ("inf", lambda f: np.max(np.abs(f))),
    (math.inf, lambda f: np.max(np.abs(f)))])
def test_clip_grad_norm_scales_all_gradients_together(rng, ord, ref):
    params, grads = _with_grads(rng)
    held = params[1].grad  # a reference taken before clipping sees the clipped gradient
    total = ref(np.concatenate([g.ravel() for g in grads]).astype(np.float64))
    out = optim.clip_grad_norm(params, max_norm=0.5, ord=ord)
    assert isinstance(out, eg.Tensor) and out.shape == ()
    np.testing.assert_allclose(out.numpy(), total, rtol=1e-5)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * 0.5 / (total + 1e-6), rtol=1e-5, atol=1e-6)
    assert held is params[1].grad


def test_clip_grad_norm_below_the_bound_changes_nothing_and_skips_missing_grads(rng):
    params, grads = _with_grads(rng)
    params[1].grad = None
    total = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in (grads[0], grads[2])))
    out = optim.clip_grad_norm_(params, 1e3)  # PyTorch's spelling
    np.testing.assert_allclose(out.numpy(), total, rtol=1e-5)
    assert params[1].grad is None
    np.testing.assert_array_equal(params[0].grad.numpy(), grads[0])
    np.testing.assert_array_equal(params[2].grad.numpy(), grads[2])


def test_clip_grad_norm_of_one_tensor_and_of_no_gradients(rng):
    params, grads = _with_grads(rng)
    out = optim.clip_grad_norm(params[0], 0.1)
    np.testing.assert_allclose(out.numpy(), np.linalg.norm(grads[0]), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(params[0].grad.numpy()), 0.1, rtol=1e-4)
    bare = eg.Parameter(eg.ones(2))
    assert float(optim.clip_grad_norm([bare], 1.0)) == 0.0 and bare.grad is None


def test_clip_grad_value_clamps_and_skips_missing_grads(rng):
    params, grads = _with_grads(rng)
    params[2].grad = None
    assert optim.clip_grad_value(params, lower=-0.3, upper=0.5) is None
    for p, g in zip(params[:2], grads):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -0.3, 0.5))
    assert params[2].grad is None
    optim.clip_grad_value_(params[0], 0.1)  # PyTorch's spelling: [-0.1, 0.1]
    np.testing.assert_array_equal(params[0].grad.numpy(), np.clip(grads[0], -0.1, 0.1))


@pytest.mark.parametrize("call, error", [
    (lambda ps: optim.clip_grad_norm(ps, 1.0, ord=0), OpArgumentError),
    (lambda ps: optim.clip_grad_norm(ps, 1.0, ord="fro"), OpArgumentError),
    (lambda ps: optim.clip_grad_norm(ps, -1.0), OpArgumentError),
    (lambda ps: optim.clip_grad_value(ps, 1.0, -1.0), OpArgumentError),
    (lambda ps: optim.clip_grad_norm([*ps, np.ones(3)], 1.0), OpTypeError),
], ids=["ord-0", "ord-str", "negative-max", "lower-above-upper", "not-a-tensor"])
def test_clip_argument_errors(rng, call, error):
    params, grads = _with_grads(rng)
    with pytest.raises(error, match="clip_grad_"):
        call(params)
    for p, g in zip(params, grads):  # nothing was clipped
        np.testing.assert_array_equal(p.grad.numpy(), g)
