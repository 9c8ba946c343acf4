"""Tests for the modules added for MegEngine and PyTorch parity (activations with arguments,
Dropout2d, Upsample, ModuleDict, `Module.apply` / `requires_grad_`, the recurrent layers) and for
BatchNorm's dtype, `track_running_stats` and MegEngine state-dict shapes.

Every layer's value and gradient (w.r.t. input and parameters) is compared with an independent
jax reference through `jax.vjp`; the recurrent references are hand-written loops over PyTorch's
equations, and LSTM / GRU are also checked compiled (`partial_trace`) against eager.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.errors import OpArgumentError
from tests.partial.differential import World, check_against_eager

RNN_TOL = dict(rtol=2e-5, atol=2e-5)


def _f32(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _is_t(v):
    return isinstance(v, eg.Tensor)


def check_vjp(run, leaves, ref, *, rtol=1e-5, atol=1e-5, seed=0):
    """`run()` computes eagerly from the Tensors `leaves` (inputs and parameters); `ref(*arrays)`
    computes the same in jax from their values. Outputs (any tuple nesting) and the gradients of
    every leaf at a random cotangent must agree with `jax.vjp(ref)`."""
    want, pullback = jax.vjp(ref, *(jnp.asarray(t.numpy()) for t in leaves))
    rng = np.random.default_rng(seed)
    want_flat, tree = jax.tree.flatten(want)
    cts = [rng.standard_normal(w.shape).astype(np.float32) for w in want_flat]
    for t in leaves:
        t.grad = None
    gm = GradManager().attach(leaves)
    with gm:
        got = run()
        got_flat, got_tree = jax.tree.flatten(got, is_leaf=_is_t)
        assert got_tree == tree, f"output structure {got_tree} != {tree}"
        gm.backward(got_flat, [eg.tensor(c) for c in cts])
    for k, (g, w) in enumerate(zip(got_flat, want_flat)):
        assert g.shape == w.shape, f"output {k}: shape {g.shape} != {w.shape}"
        np.testing.assert_allclose(g.numpy(), w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    grads = pullback(jax.tree.unflatten(tree, [jnp.asarray(c) for c in cts]))
    for k, (t, g) in enumerate(zip(leaves, grads)):
        assert t.grad is not None, f"no gradient reached leaf {k}"
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=rtol * 10, atol=atol * 10,
                                   err_msg=f"gradient of leaf {k}")


# ----- activations ------------------------------------------------------------------------------
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
    x = eg.tensor(_f32(rng, 3, 2, 4, scale=4.0))  # both sides of every kink
    check_vjp(lambda: layer(x), [x], ref)


@pytest.mark.parametrize("num, shape", [(1, (5,)), (3, (2, 3, 2, 2)), (3, (4, 3))])
def test_prelu_value_and_gradients(rng, num, shape):
    layer = M.PReLU(num, init=0.1)
    assert [(n, p.shape) for n, p in layer.named_parameters()] == [("weight", (num,))]
    np.testing.assert_array_equal(layer.weight.numpy(), np.full(num, 0.1, np.float32))
    layer.load_state_dict({"weight": _f32(rng, num)})
    x = eg.tensor(_f32(rng, *shape, scale=3.0))

    def ref(v, w):
        w = w.reshape((1, num) + (1,) * (v.ndim - 2)) if num > 1 else w
        return jnp.where(v > 0, v, w * v)

    check_vjp(lambda: layer(x), [x, layer.weight], ref)


def test_prelu_default_and_megengine_weight_layout(rng):
    assert M.PReLU().weight.numpy().tolist() == [0.25]
    layer = M.PReLU(3)
    w = _f32(rng, 1, 3, 1, 1)
    layer.load_state_dict({"weight": w})  # MegEngine keeps a per-channel weight as (1, C, 1, 1)
    assert layer.weight.shape == (3,) and layer.state_dict()["weight"].shape == (3,)
    x = _f32(rng, 2, 3, 2, 2)
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
    x = eg.tensor(_f32(rng, *shape, scale=2.0))
    check_vjp(lambda: layer(x), [x], lambda v: jnp.exp(v) / jnp.exp(v).sum(axis, keepdims=True))


def test_softmax_rejects_conflicting_axis_and_dim():
    assert M.Softmax(1, dim=1).axis == 1
    with pytest.raises(eg.OpArgumentError, match="axis=0 and dim=1"):
        M.Softmax(0, dim=1)


# ----- Dropout2d --------------------------------------------------------------------------------
def test_dropout2d_zeroes_whole_channels_and_rescales(rng):
    layer = M.Dropout2d(0.4)
    x_np = np.abs(_f32(rng, 40, 50, 3, 2)) + 0.5
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
    x = eg.tensor(_f32(rng, 2, 8, 2, 2))
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


# ----- Upsample ---------------------------------------------------------------------------------
def test_upsample_nearest_repeats_pixels(rng):
    x = eg.tensor(_f32(rng, 2, 3, 2, 3))
    ref = lambda v: jnp.repeat(jnp.repeat(v, 2, axis=2), 2, axis=3)  # noqa: E731
    check_vjp(lambda: M.Upsample(scale_factor=2)(x), [x], ref)
    check_vjp(lambda: M.Upsample(size=(4, 6))(x), [x], ref)


def test_upsample_bilinear_matches_half_pixel_resize(rng):
    x = eg.tensor(_f32(rng, 1, 2, 3, 4))
    layer = M.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    check_vjp(lambda: layer(x), [x],
              lambda v: jax.image.resize(v, (1, 2, 6, 8), "linear", antialias=False))


def test_upsample_bilinear_align_corners(rng):
    x_np = _f32(rng, 1, 1, 2, 3)
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


# ----- ModuleDict, apply, requires_grad_ --------------------------------------------------------
def test_module_dict_names_children_by_key():
    d = M.ModuleDict({"enc": M.Linear(2, 3), "act": M.ReLU()})
    d["dec"] = M.Linear(3, 1)
    assert list(d) == ["enc", "act", "dec"] and len(d) == 3 and "act" in d
    assert [n for n, _ in d.named_parameters()] == ["enc.weight", "enc.bias", "dec.weight",
                                                    "dec.bias"]
    assert [n for n, _ in d.named_children()] == ["enc", "act", "dec"]
    assert d["dec"].weight is d.parameters()[2]
    assert isinstance(d["act"], M.ReLU) and list(d.keys()) == list(d)

    class Net(M.Module):
        def __init__(self):
            super().__init__()
            self.heads = M.ModuleDict([("cls", M.Linear(4, 2)), ("box", M.Linear(4, 4))])
            self.norm = M.BatchNorm1d(4)

    net = Net()
    assert list(net.state_dict()) == [
        "heads.cls.weight", "heads.cls.bias", "heads.box.weight", "heads.box.bias",
        "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var"]
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
    assert d.parameters()[0] is replaced.weight
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
        gm.backward(net(eg.tensor(_f32(rng, 4, 2))).sum())
    assert [p.grad is None for p in net.parameters()] == [True, True, False, False]


# ----- recurrent layers: references -------------------------------------------------------------
def _sig(v):
    return 1.0 / (1.0 + jnp.exp(-v))


def _cell_ref(mode, x, state, w_ih, w_hh, b_ih, b_hh):
    """One step of PyTorch's equations, gate by gate."""
    b_ih = 0.0 if b_ih is None else b_ih
    b_hh = 0.0 if b_hh is None else b_hh
    gi, gh = x @ w_ih.T + b_ih, (state[0] if mode == "LSTM" else state) @ w_hh.T + b_hh
    hs = w_hh.shape[1]
    part = lambda g, k: g[..., k * hs:(k + 1) * hs]  # noqa: E731
    if mode == "LSTM":
        _, c = state
        g = gi + gh
        i, f, cand, o = _sig(part(g, 0)), _sig(part(g, 1)), jnp.tanh(part(g, 2)), _sig(part(g, 3))
        c = f * c + i * cand
        return o * jnp.tanh(c), c
    if mode == "GRU":
        r = _sig(part(gi, 0) + part(gh, 0))
        z = _sig(part(gi, 1) + part(gh, 1))
        n = jnp.tanh(part(gi, 2) + r * part(gh, 2))
        return (1 - z) * n + z * state
    act = jnp.tanh if mode == "tanh" else lambda v: jnp.maximum(v, 0.0)
    return act(gi + gh)


def _seq_ref(mode, layer_mod, x, h0, c0, params):
    """The whole multi-layer, maybe bidirectional recurrence over time-major x (L, N, I)."""
    dirs = 2 if layer_mod.bidirectional else 1
    finals = []
    for layer in range(layer_mod.num_layers):
        outs = []
        for d in range(dirs):
            name = f"l{layer}" + ("_reverse" if d else "")
            w = [params.get(f"{k}_{name}") for k in ("weight_ih", "weight_hh", "bias_ih",
                                                     "bias_hh")]
            k = layer * dirs + d
            state = (h0[k], c0[k]) if mode == "LSTM" else h0[k]
            steps = range(x.shape[0])[::-1] if d else range(x.shape[0])
            out = [None] * x.shape[0]
            for t in steps:
                state = _cell_ref(mode, x[t], state, *w)
                out[t] = state[0] if mode == "LSTM" else state
            outs.append(jnp.stack(out))
            finals.append(state)
        x = jnp.concatenate(outs, axis=-1)
    if mode == "LSTM":
        return x, (jnp.stack([s[0] for s in finals]), jnp.stack([s[1] for s in finals]))
    return x, jnp.stack(finals)


def _load_random(layer, rng):
    layer.load_state_dict({n: _f32(rng, *p.shape, scale=0.5) for n, p in
                           layer.named_parameters()})


# ----- recurrent layers: cells ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("cls, mode, gates, bias", [
    (M.RNNCell, "tanh", 1, True), (M.LSTMCell, "LSTM", 4, True), (M.GRUCell, "GRU", 3, False)])
def test_cells_over_several_steps(rng, cls, mode, gates, bias):
    cell = cls(3, 4, bias=bias)
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
    assert [n for n, _ in cell.named_parameters()] == names
    assert cell.weight_ih.shape == (gates * 4, 3) and cell.weight_hh.shape == (gates * 4, 4)
    assert all(np.abs(p.numpy()).max() <= 0.5 for p in cell.parameters())  # U(+-1/sqrt(H))
    _load_random(cell, rng)
    xs = eg.tensor(_f32(rng, 3, 2, 3))
    h0 = eg.tensor(_f32(rng, 2, 4))
    c0 = eg.tensor(_f32(rng, 2, 4))
    params = cell.parameters()

    def run():
        state = (h0, c0) if mode == "LSTM" else h0
        for t in range(3):
            state = cell(xs[t], state)
        return state

    def ref(x, h, c, *ps):
        w = dict(zip(names, ps))
        state = (h, c) if mode == "LSTM" else h
        for t in range(3):
            state = _cell_ref(mode, x[t], state, w["weight_ih"], w["weight_hh"],
                              w.get("bias_ih"), w.get("bias_hh"))
        return state

    check_vjp(run, [xs, h0, c0] + params, ref, **RNN_TOL) if mode == "LSTM" else \
        check_vjp(run, [xs, h0] + params, lambda x, h, *ps: ref(x, h, None, *ps), **RNN_TOL)


def test_cells_default_state_unbatched_and_relu(rng):
    cell = M.RNNCell(3, 4, nonlinearity="relu")
    _load_random(cell, rng)
    x = _f32(rng, 2, 3)
    w = {n: p.numpy() for n, p in cell.named_parameters()}
    expected = np.maximum(x @ w["weight_ih"].T + w["bias_ih"] + w["bias_hh"], 0)
    np.testing.assert_allclose(cell(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cell(eg.tensor(x[0])).numpy(), expected[0], rtol=1e-5, atol=1e-6)
    lstm = M.LSTMCell(3, 4)
    h, c = lstm(eg.tensor(x[0]))
    hb, cb = lstm(eg.tensor(x[:1]), (eg.zeros((1, 4)), eg.zeros((1, 4))))
    assert h.shape == c.shape == (4,)
    np.testing.assert_allclose(h.numpy(), hb.numpy()[0], rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), cb.numpy()[0], rtol=1e-6)


def test_recurrent_argument_errors():
    with pytest.raises(eg.OpArgumentError, match="nonlinearity"):
        M.RNNCell(2, 3, nonlinearity="sigmoid")
    with pytest.raises(eg.OpArgumentError, match="3 features"):
        M.GRUCell(3, 4)(eg.ones((2, 5)))
    with pytest.raises(eg.OpArgumentError, match=r"\(2, 4\)"):
        M.LSTMCell(3, 4)(eg.ones((2, 3)), (eg.ones((2, 4)), eg.ones((1, 4))))
    with pytest.raises(eg.OpArgumentError, match=r"h_0 must have shape \(2, 3, 4\)"):
        M.GRU(2, 4, num_layers=2)(eg.ones((5, 3, 2)), eg.ones((1, 3, 4)))
    with pytest.raises(eg.OpArgumentError, match="num_layers"):
        M.LSTM(2, 4, num_layers=0)
    with pytest.raises(eg.OpArgumentError, match="dropout"):
        M.LSTM(2, 4, dropout=1.0)


# ----- recurrent layers: sequences --------------------------------------------------------------
@pytest.mark.parametrize("cls, mode, cfg", [
    (M.LSTM, "LSTM", dict()),
    (M.LSTM, "LSTM", dict(num_layers=2, bidirectional=True, batch_first=True)),
    (M.GRU, "GRU", dict(bidirectional=True, bias=False)),
    (M.GRU, "GRU", dict(num_layers=2, batch_first=True)),
    (M.RNN, "relu", dict(nonlinearity="relu", bidirectional=True)),
], ids=["lstm", "lstm-2-bi-bf", "gru-bi-nobias", "gru-2-bf", "rnn-relu-bi"])
def test_sequence_layers_against_reference(rng, cls, mode, cfg):
    layer = cls(3, 4, **cfg)
    layers, dirs = cfg.get("num_layers", 1), 2 if cfg.get("bidirectional") else 1
    _load_random(layer, rng)
    names = [n for n, _ in layer.named_parameters()]
    want_names = [f"{k}_l{i}{s}" for i in range(layers) for s in ("", "_reverse")[:dirs]
                  for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                  if cfg.get("bias", True) or k.startswith("weight")]
    assert names == want_names
    batch_first = cfg.get("batch_first", False)
    x = eg.tensor(_f32(rng, *((2, 3, 3) if batch_first else (3, 2, 3))))
    h0 = eg.tensor(_f32(rng, layers * dirs, 2, 4))
    c0 = eg.tensor(_f32(rng, layers * dirs, 2, 4))
    lstm = mode == "LSTM"

    def ref(xv, h, c, *ps):
        xt = xv.transpose(1, 0, 2) if batch_first else xv
        out, state = _seq_ref(mode, layer, xt, h, c, dict(zip(names, ps)))
        return (out.transpose(1, 0, 2) if batch_first else out), state

    if lstm:
        check_vjp(lambda: layer(x, (h0, c0)), [x, h0, c0] + layer.parameters(), ref, **RNN_TOL)
    else:
        check_vjp(lambda: layer(x, h0), [x, h0] + layer.parameters(),
                  lambda xv, h, *ps: ref(xv, h, None, *ps), **RNN_TOL)


def test_sequence_default_state_and_unbatched_input(rng):
    lstm = M.LSTM(3, 4, num_layers=2, bidirectional=True)
    x = _f32(rng, 3, 3)
    out, (h, c) = lstm(eg.tensor(x))
    assert out.shape == (3, 8) and h.shape == c.shape == (4, 4)
    bout, (bh, bc) = lstm(eg.tensor(x[:, None]), (eg.zeros((4, 1, 4)), eg.zeros((4, 1, 4))))
    np.testing.assert_allclose(out.numpy(), bout.numpy()[:, 0], rtol=1e-6)
    np.testing.assert_allclose(h.numpy(), bh.numpy()[:, 0], rtol=1e-6)
    gru = M.GRU(3, 4)
    out, h = gru(eg.tensor(x), eg.zeros((1, 4)))
    assert out.shape == (3, 4) and h.shape == (1, 4)
    np.testing.assert_allclose(out.numpy()[-1], h.numpy()[0], rtol=1e-6)


def test_dropout_between_layers_only_in_training(rng):
    lstm = M.LSTM(3, 4, num_layers=2, dropout=0.5)
    plain = M.LSTM(3, 4, num_layers=2)
    plain.load_state_dict(lstm.state_dict())
    x = eg.tensor(_f32(rng, 3, 2, 3))
    assert not np.allclose(lstm(x)[0].numpy(), plain(x)[0].numpy())
    eg.random.seed(1)
    a = lstm(x)[0].numpy()
    eg.random.seed(1)
    np.testing.assert_array_equal(lstm(x)[0].numpy(), a)
    lstm.eval()
    np.testing.assert_allclose(lstm(x)[0].numpy(), plain(x)[0].numpy(), rtol=1e-6)


@pytest.mark.slow
def test_lstm_and_gru_compiled_equal_eager():
    """An LSTM feeding a GRU inside one `partial_trace` region trains like eager: outputs, final
    states, gradients and parameters over steps."""
    def build(wrap):
        lstm = M.LSTM(3, 4, bidirectional=True, batch_first=True)
        gru = M.GRU(8, 4, batch_first=True)
        params = lstm.parameters() + gru.parameters()
        opt = optim.SGD(params, lr=0.1)
        gm = GradManager().attach(params)

        def body(x, hx):
            out, (h, c) = lstm(x, hx)
            out, g = gru(out)
            return out, h, c, g

        fwd = wrap(body)

        def step(i):
            rng = np.random.default_rng(i)
            x = eg.tensor(_f32(rng, 2, 2, 3))
            hx = (eg.tensor(_f32(rng, 2, 2, 4)), eg.tensor(_f32(rng, 2, 2, 4)))
            with gm:
                out, h, c, g = fwd(x, hx)
                loss = (out ** 2).mean() + (h * c).sum() * 0.1 + g.sum() * 0.1
                gm.backward(loss)
            grads = [p.grad for p in params]
            opt.step().clear_grad()
            return out, h, c, g, loss, grads

        return World(step, modules=[lstm, gru], optimizers=[opt], traced=[fwd])

    world = check_against_eager(build, steps=2, rtol=2e-5, atol=2e-5)
    assert world.traced[0].cache_info().captures == 1


# ----- BatchNorm --------------------------------------------------------------------------------
def _bn_ref(x, axes, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("cls, shape, dtype", [
    (M.BatchNorm2d, (4, 3, 2, 2), np.float16), (M.BatchNorm1d, (8, 3), np.float16),
    (M.SyncBatchNorm, (4, 3, 5), np.float16), (M.BatchNorm2d, (4, 3, 2, 2), jnp.bfloat16)])
def test_batchnorm_low_precision_input_keeps_its_dtype(rng, cls, shape, dtype):
    bn = cls(3)
    x_low = (_f32(rng, *shape) * 2 + 1).astype(dtype)
    x32 = np.asarray(x_low, np.float32)  # the values the layer sees, exactly
    axes = (0, *range(2, len(shape)))
    x = eg.tensor(x_low)
    # Autodiff takes bfloat16 (numpy dtype kind "V") for a non-float today: gradients are
    # checked for float16 only.
    half = dtype == np.float16
    gm = GradManager().attach([x, bn.weight] if half else [])
    with gm:
        out = bn(x)
        if half:
            gm.backward(out.astype(np.float32).sum() + (out.astype(np.float32) ** 2).sum())
    assert out.dtype == np.dtype(dtype)
    assert bn.running_mean.dtype == bn.running_var.dtype == np.float32
    if half:
        assert x.grad.dtype == np.float16 and bn.weight.grad.dtype == np.float32
    tol = 1e-2 if dtype == np.float16 else 4e-2
    np.testing.assert_allclose(np.asarray(out.numpy(), np.float32), _bn_ref(x32, axes),
                               rtol=tol, atol=tol)
    n = x32.size // 3
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x32.mean(axis=axes), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(),
                               0.9 + 0.1 * x32.astype(np.float64).var(axis=axes) * n / (n - 1),
                               rtol=1e-5)
    bn.eval()
    assert bn(x).dtype == np.dtype(dtype)


def test_batchnorm_float32_gradient_unchanged(rng):
    bn = M.BatchNorm2d(3)
    x = eg.tensor(_f32(rng, 4, 3, 2, 2))
    w = bn.weight

    def ref(v, wv, bv):
        mean = v.mean(axis=(0, 2, 3), keepdims=True)
        var = ((v - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
        return (v - mean) / jnp.sqrt(var + 1e-5) * wv.reshape(1, -1, 1, 1) \
            + bv.reshape(1, -1, 1, 1)

    check_vjp(lambda: bn(x), [x, w, bn.bias], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", [M.BatchNorm2d, M.SyncBatchNorm])
def test_batchnorm_track_running_stats_read_at_call_time(rng, cls):
    bn = cls(3)
    x = _f32(rng, 4, 3, 2, 2) * 3 + 2
    bn(eg.tensor(x))
    mean, var = bn.running_mean.numpy(), bn.running_var.numpy()
    bn.track_running_stats = False
    for mode in (True, False):  # batch statistics in training and in eval, no update
        bn.train(mode)
        np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), _bn_ref(x, (0, 2, 3)), atol=1e-5)
        np.testing.assert_array_equal(bn.running_mean.numpy(), mean)
        np.testing.assert_array_equal(bn.running_var.numpy(), var)
    bn.track_running_stats = True
    bn.eval()
    expected = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    bn.train()
    bn(eg.tensor(x))
    assert not np.allclose(bn.running_mean.numpy(), mean)


def test_batchnorm_turning_tracking_on_without_buffers_is_an_error(rng):
    """It used to fall back to batch statistics silently; MegEngine refuses it, so do we."""
    bn = M.BatchNorm2d(3, track_running_stats=False)
    x = _f32(rng, 4, 3, 2, 2)
    for mode in (True, False):  # off: batch statistics in training and in eval
        np.testing.assert_allclose(bn.train(mode)(eg.tensor(x)).numpy(), _bn_ref(x, (0, 2, 3)),
                                   atol=1e-5)
    bn.track_running_stats = True
    with pytest.raises(OpArgumentError, match="built with track_running_stats=False"):
        bn(eg.tensor(x))
    assert bn.running_mean is None and bn.buffers() == []


def test_batchnorm_loads_megengine_shaped_state(rng):
    bn = M.BatchNorm2d(3)
    mge = {"weight": _f32(rng, 1, 3, 1, 1), "bias": _f32(rng, 1, 3, 1, 1),
           "running_mean": _f32(rng, 1, 3, 1, 1),
           "running_var": np.abs(_f32(rng, 1, 3, 1, 1)) + 0.5}
    bn.load_state_dict(mge)
    state = bn.state_dict()
    assert {k: v.shape for k, v in state.items()} == {k: (3,) for k in mge}
    for k, v in mge.items():
        np.testing.assert_array_equal(state[k], v.reshape(3))
    x = _f32(rng, 2, 3, 2, 2)
    expected = (x - mge["running_mean"]) / np.sqrt(mge["running_var"] + 1e-5) * mge["weight"] \
        + mge["bias"]
    np.testing.assert_allclose(bn.eval()(eg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    bn.load_state_dict(state)  # (C,) still loads; and round-trips
    np.testing.assert_array_equal(bn.running_var.numpy(), state["running_var"])
    bn1d = M.BatchNorm1d(3)
    bn1d.load_state_dict({"running_mean": mge["running_mean"][..., 0]}, strict=False)
    np.testing.assert_array_equal(bn1d.running_mean.numpy(), mge["running_mean"].reshape(3))


def test_megengine_conv_bias_loads_and_wrong_shapes_still_raise(rng):
    conv = M.Conv2d(2, 3, 1)
    bias = _f32(rng, 1, 3, 1, 1)
    conv.load_state_dict({"bias": bias}, strict=False)
    assert conv.bias.shape == (3,)
    np.testing.assert_array_equal(conv.bias.numpy(), bias.reshape(3))
    bn = M.BatchNorm2d(3)
    for shape in [(1, 4, 1, 1), (2, 3, 1, 1), (1, 1, 1, 3), (3, 1), (1, 3, 2)]:
        with pytest.raises(ValueError, match="shape"):
            bn.load_state_dict({"running_mean": np.zeros(shape, np.float32)}, strict=False)
    with pytest.raises(ValueError, match="shape"):  # only 1-d targets take the channel layout
        M.Linear(3, 1).load_state_dict({"weight": np.zeros((1, 3, 1, 1), np.float32)},
                                       strict=False)


def test_batchnorm_wrong_rank_is_an_op_argument_error():
    with pytest.raises(eg.OpArgumentError, match="BatchNorm2d expects a 4-d input"):
        M.BatchNorm2d(3)(eg.zeros((2, 3)))

