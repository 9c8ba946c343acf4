"""The recurrent layers (RNNCell, LSTMCell, GRUCell, RNN, LSTM, GRU): every layer's value and
gradient (w.r.t. input, state and parameters) against hand-written jax loops over PyTorch's
equations through `jax.vjp`, their defaults, unbatched inputs, dropout between layers, argument
errors, and LSTM / GRU compiled (`partial_trace`) against eager.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from tests.helpers import normal
from tests.partial.differential import World, check_against_eager

from .op_check import check_vjp

RNN_TOL = dict(rtol=2e-5, atol=2e-5)


# ----- references ---------------------------------------------------------------------------------
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
    layer.load_state_dict({n: normal(rng, *p.shape, scale=0.5) for n, p in
                           layer.named_parameters()})


# ----- cells --------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("cls, mode, gates, bias", [
    (M.RNNCell, "tanh", 1, True), (M.LSTMCell, "LSTM", 4, True), (M.GRUCell, "GRU", 3, False)])
def test_cells_over_several_steps(rng, cls, mode, gates, bias):
    cell = cls(3, 4, bias=bias)
    names = sorted(["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else []))
    assert [n for n, _ in cell.named_parameters()] == names  # MegEngine's order: sorted
    assert cell.weight_ih.shape == (gates * 4, 3) and cell.weight_hh.shape == (gates * 4, 4)
    assert all(np.abs(p.numpy()).max() <= 0.5 for p in cell.parameters())  # U(+-1/sqrt(H))
    _load_random(cell, rng)
    xs = eg.tensor(normal(rng, 3, 2, 3))
    h0 = eg.tensor(normal(rng, 2, 4))
    c0 = eg.tensor(normal(rng, 2, 4))
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
    x = normal(rng, 2, 3)
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


# ----- sequences ----------------------------------------------------------------------------------
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
    kinds = [k for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
             if cfg.get("bias", True) or k.startswith("weight")]
    cells = [f"cells.{i}.{d}.{k}" for i in range(layers) for d in range(dirs) for k in kinds]
    assert names == sorted(["_flatten_weights", *cells])  # MegEngine's, in its order: sorted
    # the forward reads the flat buffer: per layer and direction, each piece raveled
    pieces = [(f"{k}_l{i}{s}", ((3 if i == 0 else 4 * dirs) if k == "weight_ih" else 4)
               if k.startswith("weight") else None)
              for i in range(layers) for s in ("", "_reverse")[:dirs] for k in kinds]
    gates = layer._flatten_weights.shape[0]
    shapes = [(n, (gates, cols) if cols else (gates,)) for n, cols in pieces]
    assert layer._flatten_weights.size == sum(int(np.prod(sh)) for _, sh in shapes)
    batch_first = cfg.get("batch_first", False)
    x = eg.tensor(normal(rng, *((2, 3, 3) if batch_first else (3, 2, 3))))
    h0 = eg.tensor(normal(rng, layers * dirs, 2, 4))
    c0 = eg.tensor(normal(rng, layers * dirs, 2, 4))
    lstm = mode == "LSTM"

    def ref(xv, h, c, flat):
        flat, start, params = flat.reshape(-1), 0, {}
        for name, shape in shapes:
            n = int(np.prod(shape))
            params[name], start = flat[start:start + n].reshape(shape), start + n
        xt = xv.transpose(1, 0, 2) if batch_first else xv
        out, state = _seq_ref(mode, layer, xt, h, c, params)
        return (out.transpose(1, 0, 2) if batch_first else out), state

    flat = layer._flatten_weights
    if lstm:
        check_vjp(lambda: layer(x, (h0, c0)), [x, h0, c0, flat], ref, **RNN_TOL)
    else:
        check_vjp(lambda: layer(x, h0), [x, h0, flat],
                  lambda xv, h, f: ref(xv, h, None, f), **RNN_TOL)


def test_sequence_default_state_and_unbatched_input(rng):
    lstm = M.LSTM(3, 4, num_layers=2, bidirectional=True)
    x = normal(rng, 3, 3)
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
    x = eg.tensor(normal(rng, 3, 2, 3))
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
            x = eg.tensor(normal(rng, 2, 2, 3))
            hx = (eg.tensor(normal(rng, 2, 2, 4)), eg.tensor(normal(rng, 2, 2, 4)))
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


