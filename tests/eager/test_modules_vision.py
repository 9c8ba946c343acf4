"""The image layers (InstanceNorm, Conv3d, AdaptiveMaxPool2d, Pad, PixelShuffle,
LocalResponseNorm, Dropout2d, Upsample), the fused ConvRelu2d / ConvBn2d / ConvBnRelu2d, Conv2d's
`padding_mode` and BatchNorm's `freeze`: state-dict names and shapes, forward passes against
numpy or jax references, gradients, and the compiled forms against eager.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from tests.helpers import normal
from tests.partial.differential import World, check_against_eager

from .op_check import assert_close, check_fn, check_vjp
from .references import (
    conv2d_ref,
    conv3d_ref,
    instance_norm_ref,
    lrn_ref,
    pixel_shuffle_ref,
)

TOL = dict(rtol=1e-4, atol=1e-5)


def _shapes(module):
    return {k: tuple(np.shape(v)) for k, v in module.state_dict().items()}


def test_state_dict_names_and_shapes():
    """MegEngine's names; a conv bias is (1, C, 1, ...) as MegEngine's, a norm's affine vectors
    (C,); grouped weights (groups, out/groups, in/groups, ...) as MegEngine's (PyTorch's flat
    layout loads too)."""
    assert _shapes(M.InstanceNorm(3)) == {"weight": (3,), "bias": (3,)}
    assert _shapes(M.InstanceNorm(3, affine=False)) == {}
    # the layers' shapes of the other tests: each new parameter shape costs a compiled draw
    assert _shapes(M.Conv3d(2, 4, (2, 1, 2), groups=2)) == {"weight": (2, 2, 1, 2, 1, 2),
                                                            "bias": (1, 4, 1, 1, 1)}
    assert _shapes(M.Conv3d(2, 4, (2, 1, 2), groups=2, bias=False)) == {
        "weight": (2, 2, 1, 2, 1, 2)}
    assert _shapes(M.ConvRelu2d(3, 4, 3)) == {"weight": (4, 3, 3, 3), "bias": (1, 4, 1, 1)}
    bn = {"bn.weight": (4,), "bn.bias": (4,), "bn.running_mean": (4,), "bn.running_var": (4,)}
    assert _shapes(M.ConvBn2d(3, 4, 3)) == {"conv.weight": (4, 3, 3, 3), "conv.bias": (1, 4, 1, 1),
                                            **bn}
    assert _shapes(M.ConvBnRelu2d(3, 4, 3, bias=False)) == {"conv.weight": (4, 3, 3, 3), **bn}
    for layer in (M.Pad(((0, 0), (1, 1))), M.PixelShuffle(2), M.LocalResponseNorm(),
                  M.AdaptiveMaxPool2d(2)):
        assert _shapes(layer) == {}


def test_layers_against_references(rng):
    x = normal(rng, 2, 8, 5, 4, scale=2.0)
    norm = M.InstanceNorm(8)
    norm.load_state_dict({"weight": normal(rng, 8), "bias": normal(rng, 8)})
    want = instance_norm_ref(x, norm.weight.numpy(), norm.bias.numpy(), 1e-5)
    assert_close(norm(eg.tensor(x)), want, 1e-4, 1e-5, "InstanceNorm")
    pad = M.Pad(((0, 0), (1, 0), (1, 2), (0, 0)), constant_val=1.5)
    assert_close(pad(x), np.pad(x, pad.pad_width, constant_values=1.5), 0, 0, "Pad")
    reflect = M.Pad(((0, 0), (0, 0), (1, 2), (2, 1)), "reflect")
    assert_close(reflect(x), np.pad(x, reflect.pad_width, "reflect"), 0, 0, "Pad reflect")
    assert_close(M.PixelShuffle(2)(x), pixel_shuffle_ref(x, 2), 0, 0, "PixelShuffle")
    assert_close(M.LocalResponseNorm(3, 1.0, 0.01, 0.5)(x), lrn_ref(x, 3, 1.0, 0.01, 0.5),
                 1e-5, 1e-6, "LocalResponseNorm")
    pooled = M.AdaptiveMaxPool2d((2, 3))(x).numpy()  # rows [0, 3) and [2, 5); columns by 1
    assert_close(pooled[:, :, 1, 2], x[:, :, 2:5, 2:4].max(axis=(2, 3)), 0, 0, "pool")
    conv = M.Conv3d(2, 4, (2, 1, 2), stride=(2, 1, 1), padding=(0, 1, 1), dilation=(1, 1, 2),
                    groups=2)
    x3 = normal(rng, 2, 2, 5, 4, 5)
    want = conv3d_ref(x3, conv.weight.numpy().reshape(4, 1, 2, 1, 2), conv.bias.numpy(),
                      conv.stride, conv.padding, conv.dilation, 2)
    assert_close(conv(eg.tensor(x3)), want, 1e-4, 1e-4, "Conv3d")


def _padded_conv_ref(x, w, b, padding, mode):
    """numpy's padding, then the direct convolution of test_modules."""
    (ph, pw) = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), {"reflect": "reflect",
                                                          "replicate": "edge"}[mode])
    return conv2d_ref(xp, w, b, stride=(1, 2))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_conv2d_padding_modes(rng, mode):
    """Against numpy's padding and a direct convolution: the value, and the input's gradient
    (the border folded back onto the rows it copies) by finite differences."""
    conv = M.Conv2d(3, 4, 3, stride=(1, 2), padding=(2, 1), padding_mode=mode)
    w, b = conv.weight.numpy(), conv.bias.numpy()
    check_fn(conv, lambda x: _padded_conv_ref(x, w, b, (2, 1), mode), [normal(rng, 2, 3, 6, 5)],
             rtol=1e-4, atol=1e-4)


def test_conv2d_unknown_padding_mode_raises():
    with pytest.raises(eg.OpArgumentError, match="padding_mode must be one of"):
        M.Conv2d(3, 4, 3, padding=1, padding_mode="circular")
    conv = M.Conv2d(3, 4, 3)
    conv.padding_mode = "wrap"
    with pytest.raises(eg.OpArgumentError, match="'wrap'"):
        conv(eg.ones((1, 3, 4, 4)))


def _bn_train_ref(y, momentum, running_mean, running_var, eps=1e-5):
    mean, var = y.mean(axis=(0, 2, 3)), y.var(axis=(0, 2, 3))
    n = y.size // y.shape[1]
    out = (y - mean.reshape(1, -1, 1, 1)) / np.sqrt(var.reshape(1, -1, 1, 1) + eps)
    new_mean = momentum * running_mean + (1 - momentum) * mean
    new_var = momentum * running_var + (1 - momentum) * var * n / (n - 1)
    return out, new_mean, new_var


def test_fused_conv_modules(rng):
    x = normal(rng, 2, 3, 6, 5)
    for cls, act in ((M.ConvBn2d, lambda v: v), (M.ConvBnRelu2d, lambda v: np.maximum(v, 0))):
        model = cls(3, 4, 3, stride=(1, 2), padding=(2, 1), momentum=0.8)
        conv = model.conv(eg.tensor(x)).numpy()
        want, mean, var = _bn_train_ref(conv.astype(np.float64), 0.8, np.zeros(4), np.ones(4))
        assert_close(model(eg.tensor(x)), act(want), 1e-4, 1e-4, f"{cls.__name__} training")
        assert_close(model.bn.running_mean.reshape(-1), mean, **TOL, what="running mean")
        assert_close(model.bn.running_var.reshape(-1), var, **TOL, what="running var")
    relu = M.ConvRelu2d(3, 4, 3, stride=(1, 2), padding=(2, 1))
    want = np.maximum(conv2d_ref(x, relu.weight.numpy(), relu.bias.numpy(), (1, 2), (2, 1)), 0)
    assert_close(relu(eg.tensor(x)), want, **TOL, what="ConvRelu2d")


def test_batchnorm_freeze(rng):
    """Running statistics in training too, never updated; no gradient for weight and bias; the
    input's gradient is that of the fixed affine map."""
    bn = M.BatchNorm2d(3, freeze=True)
    stats = {"weight": normal(rng, 3), "bias": normal(rng, 3), "running_mean": normal(rng, 3),
             "running_var": np.abs(normal(rng, 3)) + 0.5}
    bn.load_state_dict(stats)
    scale = stats["weight"] / np.sqrt(stats["running_var"] + 1e-5)
    x = eg.tensor(normal(rng, 2, 3, 2, 2))
    gm = GradManager().attach([x, bn.weight, bn.bias])
    with gm:
        y = bn(x)
        gm.backward(y.sum())
    want = ((x.numpy() - stats["running_mean"].reshape(1, 3, 1, 1)) * scale.reshape(1, 3, 1, 1)
            + stats["bias"].reshape(1, 3, 1, 1))
    assert_close(y, want, **TOL, what="frozen output")
    assert_close(bn.running_mean.reshape(-1), stats["running_mean"], 0, 0, "running_mean kept")
    assert bn.weight.grad is None and bn.bias.grad is None
    assert_close(x.grad, np.broadcast_to(scale.reshape(1, 3, 1, 1), x.shape), **TOL,
                 what="input gradient")


def test_batchnorm_freeze_needs_running_stats():
    with pytest.raises(eg.OpArgumentError, match="track_running_stats=True"):
        M.BatchNorm2d(3, track_running_stats=False, freeze=True)


@pytest.mark.slow
def test_fused_and_frozen_modules_compiled_equal_eager():
    """ConvBnRelu2d (replicate padding) into a frozen BatchNorm2d, InstanceNorm, PixelShuffle,
    LocalResponseNorm and AdaptiveMaxPool2d, trained inside one `partial_trace` region: outputs,
    gradients, parameters and running statistics agree with eager."""
    def build(wrap):
        net = M.Sequential(M.ConvBnRelu2d(2, 8, 3, padding=1, padding_mode="replicate"),
                           M.BatchNorm2d(8, freeze=True), M.InstanceNorm(8),
                           M.PixelShuffle(2), M.LocalResponseNorm(3),
                           M.AdaptiveMaxPool2d((3, 2)), M.Conv2d(2, 2, 1))
        params = net.parameters()
        opt = optim.SGD(params, lr=0.1)
        gm = GradManager().attach(params)
        fwd = wrap(net)

        def step(i):
            x = eg.tensor(normal(np.random.default_rng(i), 2, 2, 4, 3))
            with gm:
                out = fwd(x)
                loss = (out ** 2).mean()
                gm.backward(loss)
            grads = [p.grad for p in params]
            opt.step().clear_grad()
            return out, loss, grads

        return World(step, modules=[net], optimizers=[opt], traced=[fwd])

    world = check_against_eager(build, steps=2, rtol=2e-5, atol=2e-5)
    assert world.traced[0].cache_info().captures == 1


@pytest.mark.slow
def test_functional_ops_compiled_equal_eager(rng):
    """conv3d and ctc_loss inside a region (labels and lengths are not read there)."""
    from partial import partial_trace

    x, w = eg.tensor(normal(rng, 1, 2, 3, 3, 3)), eg.tensor(normal(rng, 2, 2, 2, 2, 2))
    logits = normal(rng, 4, 2, 3)
    probs = eg.tensor(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True))
    args = (np.array([4, 3], np.int32), np.array([1, 2, 2], np.int32), np.array([2, 1], np.int32))

    def f(x, w, p):
        return F.conv3d(x, w, padding=1).sum() + F.ctc_loss(p, *args, blank=0)

    want = f(x, w, probs).item()
    assert abs(partial_trace(f)(x, w, probs).item() - want) < 1e-4 * abs(want)


# ----- Dropout2d and Upsample ---------------------------------------------------------------------
def test_dropout2d_zeroes_whole_channels_and_rescales(rng):
    layer = M.Dropout2d(0.4)
    x_np = np.abs(normal(rng, 40, 50, 3, 2)) + 0.5
    x = eg.tensor(x_np)
    gm = GradManager().attach([x])
    with gm:
        out = layer(x)
        gm.backward(out.sum())
    y = out.numpy()
    dropped = (y == 0).all(axis=(2, 3))
    kept = ~dropped
    assert ((y == 0).any(axis=(2, 3)) == dropped).all()  # a plane is all dropped or all kept
    assert 0.33 < dropped.mean() < 0.47
    np.testing.assert_allclose(y[kept], x_np[kept] / 0.6, rtol=1e-6)
    grad = x.grad.numpy()  # d(sum)/dx is the mask scaled by 1/(1-p)
    np.testing.assert_allclose(grad[kept], 1 / 0.6, rtol=1e-6)
    assert (grad[dropped] == 0).all()


def test_dropout2d_eval_identity_seed_and_errors(rng):
    x = eg.tensor(normal(rng, 2, 8, 2, 2))
    layer = M.Dropout2d(0.5)
    eg.random.seed(5)
    first, second = layer(x).numpy(), layer(x).numpy()
    eg.random.seed(5)
    np.testing.assert_array_equal(layer(x).numpy(), first)
    assert not np.array_equal(first == 0, second == 0)
    assert layer.eval()(x) is x
    assert M.Dropout2d(0.0)(x) is x
    with pytest.raises(eg.OpArgumentError, match="NCHW"):
        M.Dropout2d(0.5)(eg.ones((2, 3)))
    with pytest.raises(ValueError, match="drop_prob"):
        M.Dropout2d(1.0)(x)


def test_upsample_nearest_repeats_pixels(rng):
    x = eg.tensor(normal(rng, 2, 3, 2, 3))
    ref = lambda v: jnp.repeat(jnp.repeat(v, 2, axis=2), 2, axis=3)  # noqa: E731
    check_vjp(lambda: M.Upsample(scale_factor=2)(x), [x], ref)
    check_vjp(lambda: M.Upsample(size=(4, 6))(x), [x], ref)


def test_upsample_bilinear_matches_half_pixel_resize(rng):
    x = eg.tensor(normal(rng, 1, 2, 3, 4))
    layer = M.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    check_vjp(lambda: layer(x), [x],
              lambda v: jax.image.resize(v, (1, 2, 6, 8), "linear", antialias=False))


def test_upsample_bilinear_align_corners(rng):
    x_np = normal(rng, 1, 1, 2, 3)
    out = M.Upsample(size=(3, 5), mode="bilinear", align_corners=True)(eg.tensor(x_np)).numpy()
    # Corners map onto corners: output i samples input i * (in - 1) / (out - 1).
    rows = np.array([np.interp(np.linspace(0, 2, 5), np.arange(3), r) for r in x_np[0, 0]])
    expected = np.array([np.interp(np.linspace(0, 1, 3), np.arange(2), c) for c in rows.T]).T
    np.testing.assert_allclose(out[0, 0], expected, rtol=1e-5, atol=1e-6)


def test_upsample_needs_exactly_one_of_size_and_scale():
    with pytest.raises(eg.OpArgumentError, match="exactly one"):
        M.Upsample()
    with pytest.raises(eg.OpArgumentError, match="exactly one"):
        M.Upsample(size=4, scale_factor=2)


def test_conv_transpose3d_is_the_input_gradient_of_conv3d(rng):
    """MegEngine's ConvTranspose3d (the zoo's BigGAN imports it), grouped and strided."""
    m = M.ConvTranspose3d(4, 6, (2, 3, 1), stride=(2, 1, 2), padding=(0, 1, 0),
                          output_padding=(1, 0, 1), groups=2)
    assert m.weight.shape == (2, 2, 3, 2, 3, 1) and m.bias.shape == (1, 6, 1, 1, 1)
    x = normal(rng, 2, 4, 3, 4, 5)
    y = m(eg.tensor(x))
    w = m.weight.numpy().reshape(4, 3, 2, 3, 1)

    def conv(z):
        return jax.lax.conv_general_dilated(z, w, (2, 1, 2), [(0, 0), (1, 1), (0, 0)],
                                            dimension_numbers=("NCDHW", "OIDHW", "NCDHW"),
                                            feature_group_count=2)

    _, vjp = jax.vjp(conv, jnp.zeros((2, 6, *y.shape[2:]), jnp.float32))
    assert_close(y, vjp(x)[0] + m.bias.numpy(), 1e-5, 1e-5, "ConvTranspose3d")
