"""The convolution rewrites, made for speed on the CPU: channels-last convolutions inside compiled
regions and XLA's own convolutions on the CPU keep values and gradients equal to NCHW eager without
them (1e-5 relative), for grouped, strided, padded and dilated convolutions, transposed ones and
BatchNorm; they apply where promised and `eager.set_conv_rewrites(False)` turns them off."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
from xla_segments import CompileOptions, Segment, base_compile_options
from xla_segments.layout import channels_last, has_convolution

CPU = jax.default_backend() == "cpu"
OPTION = ("xla_cpu_experimental_ynn_fusion_type", "LIBRARY_FUSION_TYPE_REDUCE")
BASE = base_compile_options()


def assert_close(got, want, rtol=1e-5):
    """Equal to `rtol` relative to the largest value: lists of arrays are compared as one
    vector (a gradient that is zero but for round-off, a conv bias before BatchNorm, is then
    measured on the scale of the whole gradient)."""
    if isinstance(want, list):
        got, want = (np.concatenate([np.ravel(a) for a in v]) for v in (got, want))
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    scale = max(float(np.max(np.abs(want))), 1e-30)
    assert float(np.max(np.abs(got - want))) <= rtol * scale


class Net(M.Module):
    """Every kind of convolution the rewrite renumbers, with BatchNorm, max and average pooling
    (padded) and a residual."""

    def __init__(self):
        super().__init__()
        self.stem = M.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(8)
        self.grouped = M.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=4)
        self.wide = M.Conv2d(8, 12, (3, 1), stride=(1, 2), padding=(1, 0))
        self.up = M.ConvTranspose2d(12, 6, 2, stride=2)
        self.bn2 = M.BatchNorm2d(6)
        self.proj = M.Conv2d(8, 6, 1, stride=1)

    def forward(self, x):
        h = F.relu(self.bn(self.stem(x)))
        g = F.relu(self.wide(F.max_pool2d(self.grouped(h), 3, stride=1, padding=1)))
        u = self.bn2(self.up(g))
        r = self.proj(F.avg_pool2d(h, 2))
        out = F.relu(u[:, :, : r.shape[2], : r.shape[3]] + r)
        return out.mean(axis=(2, 3))


class Small(M.Module):
    """A convolution and BatchNorm: a region that convolves in its forward and its backward,
    for the tests of where the rewrites apply (Net's seven layers take seconds to compile)."""

    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = M.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x))).mean(axis=(2, 3))


def _run(wrap_kind, steps=2, model=Net):
    """Losses, gradients (of the last step) and the state after `steps` SGD steps."""
    eg.random.seed(0)
    net = model()
    x = eg.tensor(np.random.default_rng(0).standard_normal((4, 3, 12, 12)).astype(np.float32))
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    region = partial_trace(net) if wrap_kind == "partial" else net
    grads = []

    def step():
        with gm:
            loss = (region(x) ** 2).sum()
            gm.backward(loss)
        if wrap_kind != "xla":  # (an xla_trace step's gradients are not values until it ends)
            grads[:] = [p.grad.numpy() for p in net.parameters()]
        opt.step().clear_grad()
        return loss

    run = xla_trace(step) if wrap_kind == "xla" else step
    losses = [float(run().numpy()) for _ in range(steps)]
    state = {k: np.asarray(v) for k, v in net.state_dict().items()}
    return losses, grads, state, region if wrap_kind == "partial" else run


@pytest.fixture(scope="module")
def nchw_eager():
    """The reference, once per module: eager NCHW training with the rewrites off."""
    before = eg.conv_rewrites()
    eg.set_conv_rewrites(False)
    try:
        return _run("eager")
    finally:
        eg.set_conv_rewrites(before)


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["eager", "partial", "xla"])
def test_values_and_gradients_equal_nchw_eager_without_rewrites(kind, rewrites, nchw_eager):
    want_losses, want_grads, want_state, _ = nchw_eager
    eg.set_conv_rewrites(True)
    losses, grads, state, _ = _run(kind)
    assert_close(losses, want_losses)
    if kind != "xla":  # the state after the steps carries an xla_trace step's gradients
        assert_close(grads, want_grads)
    assert_close([state[k] for k in want_state], list(want_state.values()))


@pytest.mark.skipif(not CPU, reason="the rewrites apply on the CPU only")
@pytest.mark.parametrize("kind", ["partial", "xla"])
def test_the_rewrites_apply_to_compiled_regions_and_switch_off(kind, rewrites):
    eg.set_conv_rewrites(True)
    *_, fn = _run(kind, steps=1, model=Small)
    seg = fn.segments()[-1]
    assert seg.options.layout == "channels_last"
    assert all(OPTION in e.compiler_options.items() for e in seg.executables().values())
    eg.set_conv_rewrites(False)
    *_, fn = _run(kind, steps=1, model=Small)
    seg = fn.segments()[-1]
    assert seg.options.layout is None
    assert all(e.compiler_options == BASE for e in seg.executables().values())


@pytest.mark.skipif(not CPU, reason="the rewrites apply on the CPU only")
def test_switching_recompiles_a_cached_region(rewrites):
    eg.set_conv_rewrites(True)
    conv = M.Conv2d(2, 2, 3, padding=1)
    fn = partial_trace(conv)
    x = eg.ones((1, 2, 5, 5))
    want = fn(x).numpy()
    eg.set_conv_rewrites(False)
    assert_close(fn(x).numpy(), want)
    assert fn.segments()[-1].options.layout is None
    assert len(fn.segments()) == 2


@pytest.mark.skipif(not CPU, reason="the rewrites apply on the CPU only")
def test_eager_convolutions_compile_with_the_option_only_when_on(rewrites):
    op = eg.OPS["conv"]
    attrs = (("stride", (1, 1)), ("padding", (0, 0)), ("dilation", (1, 1)), ("groups", 1))
    eg.set_conv_rewrites(True)
    assert op.options(attrs) == {**BASE, OPTION[0]: OPTION[1]}
    eg.set_conv_rewrites(False)
    assert op.options(attrs) == eg.OPS["matmul"].options(()) == (BASE or None)


# ----- xla_segments: the rewrite itself and the per-executable options ----------------------
def _convs(x, w1, w2, w3):
    """NCHW, NCH and transposed convolutions, with reductions, transposes and a reshape."""
    dn = ("NCHW", "OIHW", "NCHW")
    y = jax.lax.conv_general_dilated(x, w1, (2, 1), [(1, 1), (0, 2)], rhs_dilation=(1, 2),
                                     dimension_numbers=dn)
    y = jnp.tanh(y - y.mean(axis=(0, 2, 3), keepdims=True))
    z = jax.lax.conv_general_dilated(y, w2, (1, 1), [(1, 1), (1, 1)], lhs_dilation=(2, 2),
                                     dimension_numbers=dn, feature_group_count=2)
    t = jnp.transpose(z, (0, 2, 1, 3)).sum(axis=1)  # N, C, W
    v = jax.lax.conv_general_dilated(t, w3, (1,), [(1, 1)], dimension_numbers=("NCH", "OIH",
                                                                                 "NCH"))
    return (v.reshape(v.shape[0], -1).max(axis=1), jnp.argmax(z, axis=1))


def _conv_args():
    # drawn by numpy and put on the device as they are: `jax.random.normal` compiles a sampler
    # for each shape (seconds on the CPU), and `jnp.asarray` an identity program
    rng = np.random.default_rng(0)
    return [jax.device_put(rng.standard_normal(s).astype(np.float32))
            for s in ((2, 4, 9, 7), (6, 4, 3, 3), (4, 3, 3, 3), (5, 4, 3))]


@pytest.mark.slow
def test_channels_last_keeps_values_and_gradients():
    args = _conv_args()
    fn = channels_last(_convs, args)
    assert fn is not _convs
    for got, want in zip(jax.jit(fn)(*args), _convs(*args)):
        assert_close(got, want)

    def loss(f):
        return lambda *a: jnp.sum(f(*a)[0] ** 2)

    for got, want in zip(jax.jit(jax.grad(loss(fn), argnums=(0, 1, 2, 3)))(*args),
                         jax.jit(jax.grad(loss(_convs), argnums=(0, 1, 2, 3)))(*args)):
        assert_close(got, want)


def _transposed_shapes(fn, *args):
    """Shapes of the values `fn`'s jaxpr (nested calls included) transposes."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "transpose":
                found.append(tuple(eqn.invars[0].aval.shape))
            for sub in eqn.params.values():
                if hasattr(sub, "jaxpr"):
                    walk(sub.jaxpr)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


@pytest.mark.slow
def test_channels_last_keeps_activations_channels_last_between_convolutions():
    # BatchNorm's per-channel (1, C, 1, 1) statistics and affine broadcast against the NCHW
    # activations, and pooling: the activations stay channels-last through them (gradients
    # included); only the output goes back.
    def conv_bn_conv(x, w1, w2, scale):
        dn = ("NCHW", "OIHW", "NCHW")
        y = jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME", dimension_numbers=dn)
        mean = y.mean(axis=(0, 2, 3), keepdims=True)
        y = (y - mean) * jax.lax.rsqrt(((y - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
                                       + 1e-5) * scale.reshape(1, -1, 1, 1)
        y = jax.lax.reduce_window(jnp.maximum(y, 0.0), -jnp.inf, jax.lax.max, (1, 1, 3, 3),
                                  (1, 1, 1, 1), ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return (jax.lax.conv_general_dilated(y, w2, (1, 1), "SAME", dimension_numbers=dn),)

    rng = np.random.default_rng(1)
    args = [jax.device_put(rng.standard_normal(s).astype(np.float32))
            for s in ((2, 3, 8, 8), (4, 3, 3, 3), (5, 4, 3, 3), (4,))]
    fn = channels_last(conv_bn_conv, args)
    assert_close(jax.jit(fn)(*args)[0], conv_bn_conv(*args)[0])
    activations = [s for s in _transposed_shapes(fn, *args) if len(s) == 4 and s[0] == 2]
    assert activations == [(2, 4, 4, 5)]  # the output, once

    def loss(f):
        return lambda *a: jnp.sum(f(*a)[0] ** 2)

    grads = jax.grad(loss(fn), argnums=(0, 1, 2, 3))
    for got, want in zip(jax.jit(grads)(*args),
                         jax.jit(jax.grad(loss(conv_bn_conv), argnums=(0, 1, 2, 3)))(*args)):
        assert_close(got, want)
    backward = [s for s in _transposed_shapes(grads, *args) if len(s) == 4 and s[0] == 2]
    assert len(backward) <= 2, backward  # the output's cotangent, and the input's gradient


def test_channels_last_leaves_functions_without_convolutions_alone():
    def mlp(x, w):
        return (jnp.tanh(x @ w),)

    assert channels_last(mlp, [jnp.ones((2, 3)), jnp.ones((3, 4))]) is mlp
    nested = jax.make_jaxpr(lambda *a: jax.jit(_convs)(*a))(*_conv_args())
    assert has_convolution(nested) and not has_convolution(jax.make_jaxpr(mlp)(
        jnp.ones((2, 3)), jnp.ones((3, 4))))


def test_conv_options_reach_only_executables_that_convolve():
    opts = CompileOptions(conv_options=dict([OPTION]), layout="channels_last")
    conv = Segment(_convs, _conv_args(), options=opts)
    assert conv.forward().compiler_options == {**BASE, OPTION[0]: OPTION[1]}
    mlp = Segment(lambda x, w: (jnp.tanh(x @ w),), [jnp.ones((2, 3)), jnp.ones((3, 4))],
                  options=opts)
    assert mlp.forward().compiler_options == BASE
    fwd, bwd = conv.vjp(wrt=(0, 1), diff_outputs=(0,))
    assert fwd.compiler_options == bwd.compiler_options == {**BASE, OPTION[0]: OPTION[1]}
    with pytest.raises(ValueError, match="unknown layout"):
        CompileOptions(layout="nhwc")
