"""Activation modules: the parameter-free ones against numpy, those with arguments (LeakyReLU,
ELU, ReLU6, Hardswish, PReLU, Softmax) in value and gradient against `jax.vjp` of a jnp
reference, PReLU's weight layouts and Softmax's argument checks."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.module as M
from tests.helpers import normal

from .op_check import check_vjp

_ERF = np.vectorize(math.erf)


@pytest.mark.parametrize("cls, ref", [
    (M.ReLU, lambda x: np.maximum(x, 0)),
    (M.GELU, lambda x: 0.5 * x * (1 + _ERF(x / math.sqrt(2)))),
    (M.SiLU, lambda x: x / (1 + np.exp(-x))),
    (M.Sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (M.Tanh, np.tanh),
    (M.Identity, lambda x: x),
])
def test_activation_modules(rng, cls, ref):
    layer = cls()
    assert layer.parameters() == []
    x = normal(rng, 3, 4) * 3
    np.testing.assert_allclose(layer(eg.tensor(x)).numpy(), ref(x.astype(np.float64)), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("layer, ref", [
    (M.LeakyReLU(), lambda v: jnp.where(v > 0, v, 0.01 * v)),
    (M.LeakyReLU(0.3), lambda v: jnp.where(v > 0, v, 0.3 * v)),
    (M.ELU(), lambda v: jnp.where(v > 0, v, jnp.expm1(v))),
    (M.ELU(alpha=0.5), lambda v: jnp.where(v > 0, v, 0.5 * (jnp.exp(v) - 1))),
    (M.ReLU6(), lambda v: jnp.minimum(jnp.maximum(v, 0.0), 6.0)),
    (M.Hardswish(), lambda v: v * jnp.minimum(jnp.maximum(v + 3.0, 0.0), 6.0) / 6.0),
], ids=["leaky_relu", "leaky_relu_0.3", "elu", "elu_0.5", "relu6", "hardswish"])
def test_elementwise_activation_modules(rng, layer, ref):
    assert layer.parameters() == []
    x = eg.tensor(normal(rng, 3, 2, 4, scale=4.0))  # both sides of every kink
    check_vjp(lambda: layer(x), [x], ref)


@pytest.mark.parametrize("num, shape", [(1, (5,)), (3, (2, 3, 2, 2)), (3, (4, 3))])
def test_prelu_value_and_gradients(rng, num, shape):
    layer = M.PReLU(num, init=0.1)
    shape_w = (1,) if num == 1 else (1, num, 1, 1)  # MegEngine's
    assert [(n, p.shape) for n, p in layer.named_parameters()] == [("weight", shape_w)]
    np.testing.assert_array_equal(layer.weight.numpy(), np.full(shape_w, 0.1, np.float32))
    layer.load_state_dict({"weight": normal(rng, *shape_w)})
    x = eg.tensor(normal(rng, *shape, scale=3.0))

    def ref(v, w):
        w = w.reshape((1, num) + (1,) * (v.ndim - 2)) if num > 1 else w
        return jnp.where(v > 0, v, w * v)

    check_vjp(lambda: layer(x), [x, layer.weight], ref)


def test_prelu_default_and_megengine_weight_layout(rng):
    assert M.PReLU().weight.numpy().tolist() == [0.25]
    layer = M.PReLU(3)
    w = normal(rng, 3)
    layer.load_state_dict({"weight": w})  # PyTorch keeps a per-channel weight as (C,)
    assert layer.weight.shape == (1, 3, 1, 1) and layer.state_dict()["weight"].shape == (1, 3, 1, 1)
    w = w.reshape(1, 3, 1, 1)
    x = normal(rng, 2, 3, 2, 2)
    np.testing.assert_allclose(layer(eg.tensor(x)).numpy(), np.where(x > 0, x, w * x), rtol=1e-6)
    with pytest.raises(eg.OpArgumentError, match="channel"):
        layer(eg.ones((2, 4, 2, 2)))
    with pytest.raises(ValueError):
        M.PReLU(0)


@pytest.mark.parametrize("kwargs, shape, axis", [
    (dict(axis=-1), (2, 3, 4), -1),
    (dict(dim=1), (2, 3, 4), 1),
    (dict(), (3, 4), 1),  # MegEngine's default axis: 1 for 2-d input,
    (dict(), (2, 3, 4), 0),  # 0 for 3-d input
])
def test_softmax_module(rng, kwargs, shape, axis):
    layer = M.Softmax(**kwargs)
    x = eg.tensor(normal(rng, *shape, scale=2.0))
    check_vjp(lambda: layer(x), [x], lambda v: jnp.exp(v) / jnp.exp(v).sum(axis, keepdims=True))


def test_softmax_rejects_conflicting_axis_and_dim():
    assert M.Softmax(1, dim=1).axis == 1
    with pytest.raises(eg.OpArgumentError, match="axis=0 and dim=1"):
        M.Softmax(0, dim=1)
