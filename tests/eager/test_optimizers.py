"""The optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW (PyTorch semantics),
and Adagrad, Adadelta and LAMB (MegEngine's rules), each stepped with fixed gradients against
hand-written float64 numpy updates (parameters and state); optimizer state and param groups, state
dicts, and validation. The learning-rate schedulers are in test_lr_schedulers.py, clipping in
test_grad_clipping.py, optimizers inside `xla_trace` in test_optimizers_in_xla_trace.py, and the
update ops themselves in test_ops_updates.py.
"""


import numpy as np
import pytest

import eager as eg
import eager.optimizer as optim
from eager.core.errors import OpArgumentError

RTOL, ATOL = 1e-5, 1e-6
SHAPES = [(3,), (2, 2)]
STEPS = 5


def _setup(rng, shapes=SHAPES, steps=STEPS):
    """Initial values, one fixed gradient per step for each parameter, and fresh Parameters."""
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return init, grads, [eg.Parameter(v) for v in init]


def _assign(params, grads):
    for p, g in zip(params, grads):
        p.grad = eg.tensor(g)


def _close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


# ----- numpy references -------------------------------------------------------------------------
def sgd_ref(p, grads, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
    """PyTorch SGD; yields the parameter after every step."""
    p, buf = p.astype(np.float64), np.zeros(p.shape)
    for g in grads:
        g = g + weight_decay * p
        if momentum:
            buf = momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
        yield p


def adam_ref(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    """PyTorch Adam / AdamW; yields (param, exp_avg, exp_avg_sq) after every step."""
    b1, b2 = betas
    p, m, v = p.astype(np.float64), np.zeros(p.shape), np.zeros(p.shape)
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1**t) * m / (np.sqrt(v) / np.sqrt(1 - b2**t) + eps)
        yield p, m, v


def _run(opt, params, grads):
    for step_grads in grads:
        _assign(params, step_grads)
        opt.step()
        yield [p.numpy() for p in params]


# ----- update rules -----------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(),
    dict(momentum=0.9),
    dict(momentum=0.8, nesterov=True),
    dict(weight_decay=0.1),
    dict(momentum=0.9, weight_decay=0.05),
    dict(momentum=0.7, nesterov=True, weight_decay=0.2),
], ids=["plain", "momentum", "nesterov", "wd", "momentum-wd", "nesterov-wd"])
def test_sgd_matches_reference(rng, kw):
    init, grads, params = _setup(rng)
    opt = optim.SGD(params, lr=0.1, **kw)
    refs = [list(sgd_ref(p0, [g[i] for g in grads], 0.1, **kw)) for i, p0 in enumerate(init)]
    for step, values in enumerate(_run(opt, params, grads)):
        for i, v in enumerate(values):
            _close(v, refs[i][step])


def test_sgd_first_momentum_step_moves_by_lr_times_grad(rng):
    init, grads, params = _setup(rng, steps=1)
    opt = optim.SGD(params, lr=0.5, momentum=0.9)
    _assign(params, grads[0])
    opt.step()
    for p, p0, g in zip(params, init, grads[0]):
        _close(p.numpy(), p0 - 0.5 * g)
        _close(opt.state[p]["momentum_buffer"].numpy(), g)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.05, weight_decay=0.1),
], ids=["defaults", "betas-eps", "l2"])
def test_adam_matches_reference(rng, kw):
    init, grads, params = _setup(rng)
    opt = optim.Adam(params, **kw)
    ref_kw = {"lr": 1e-3} | kw
    refs = [list(adam_ref(p0, [g[i] for g in grads], **ref_kw)) for i, p0 in enumerate(init)]
    for step, values in enumerate(_run(opt, params, grads)):
        for i, (p, v) in enumerate(zip(params, values)):
            ref_p, ref_m, ref_v = refs[i][step]
            _close(v, ref_p)
            _close(opt.state[p]["exp_avg"].numpy(), ref_m)
            _close(opt.state[p]["exp_avg_sq"].numpy(), ref_v)
            assert int(opt.state[p]["step"].item()) == step + 1


@pytest.mark.parametrize("kw", [dict(lr=0.05), dict(lr=0.1, weight_decay=0.3)],
                         ids=["default-decay", "decay-0.3"])
def test_adamw_matches_reference(rng, kw):
    init, grads, params = _setup(rng)
    opt = optim.AdamW(params, **kw)
    ref_kw = {"weight_decay": 0.01} | kw
    refs = [list(adam_ref(p0, [g[i] for g in grads], decoupled=True, **ref_kw))
            for i, p0 in enumerate(init)]
    for step, values in enumerate(_run(opt, params, grads)):
        for i, v in enumerate(values):
            _close(v, refs[i][step][0])


def test_adamw_decay_is_decoupled_from_the_gradient(rng):
    """With a zero gradient Adam's step is zero, so AdamW only shrinks p by lr * wd."""
    p0 = rng.standard_normal(4).astype(np.float32)
    p = eg.Parameter(p0)
    opt = optim.AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = eg.zeros(4)
    opt.step()
    _close(p.numpy(), p0 * (1 - 0.1 * 0.5))
    q = eg.Parameter(p0)
    adam = optim.Adam([q], lr=0.1, weight_decay=0.5)
    q.grad = eg.zeros(4)
    adam.step()
    _close(q.numpy(), p0 - 0.1 * np.sign(p0) * (1 / (1 + 1e-8 / (0.5 * np.abs(p0)))))


def test_defaults():
    p = eg.Parameter(eg.ones(2))
    adam, adamw = optim.Adam([p]), optim.AdamW([p])
    for opt, wd in ((adam, 0.0), (adamw, 0.01)):
        g = opt.param_groups[0]
        assert (g["lr"], tuple(g["betas"]), g["eps"], g["weight_decay"]) == (
            1e-3, (0.9, 0.999), 1e-8, wd)
    sgd = optim.SGD([p], lr=0.1).param_groups[0]
    assert (sgd["lr"], sgd["momentum"], sgd["nesterov"], sgd["weight_decay"]) == (
        0.1, 0.0, False, 0.0)


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: optim.Adam(ps, lr=0.1),
], ids=["sgd", "adam"])
def test_params_without_grad_are_skipped(rng, make):
    init, grads, params = _setup(rng, steps=1)
    opt = make(params)
    params[0].grad = eg.tensor(grads[0][0])
    before = {k: t.numpy() for k, t in opt.state[params[1]].items()}
    opt.step()
    assert not np.allclose(params[0].numpy(), init[0])
    np.testing.assert_array_equal(params[1].numpy(), init[1])
    for k, t in opt.state[params[1]].items():
        np.testing.assert_array_equal(t.numpy(), before[k])


def test_step_and_clear_grad_return_the_optimizer(rng):
    _, grads, params = _setup(rng, steps=1)
    opt = optim.SGD(params, lr=0.1)
    _assign(params, grads[0])
    assert opt.step() is opt
    assert opt.clear_grad() is opt
    assert all(p.grad is None for p in params)
    _assign(params, grads[0])
    assert opt.zero_grad() is opt
    assert all(p.grad is None for p in params)


# ----- Adagrad, Adadelta and LAMB: MegEngine's rules in float64 numpy, one parameter; each yields
# (param, state) per step
def adagrad_ref(p, grads, lr=1e-2, lr_decay=0.0, eps=1e-10, weight_decay=0.0,
                initial_accumulator_value=0.0):
    p = p.astype(np.float64)
    acc = np.full(p.shape, initial_accumulator_value)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * p
        acc = acc + g * g
        p = p - lr / (1 + (t - 1) * lr_decay) * g / np.sqrt(acc + eps)
        yield p, {"square_avg": acc, "step": t}


def adadelta_ref(p, grads, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
    p, sq, acc = p.astype(np.float64), np.zeros(p.shape), np.zeros(p.shape)
    for t, g in enumerate(grads, start=1):
        g = g + weight_decay * p
        sq = rho * sq + (1 - rho) * g * g
        delta = np.sqrt(acc + eps) / np.sqrt(sq + eps) * g
        acc = rho * acc + (1 - rho) * delta * delta
        p = p - lr * delta
        yield p, {"square_avg": sq, "acc_delta": acc, "step": t}


def lamb_ref(p, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, bias_correction=True,
             weight_decay=0.0, always_adapt=False):
    (b1, b2), p = betas, p.astype(np.float64)
    m, v = np.zeros(p.shape), np.zeros(p.shape)
    for t, g in enumerate(grads, start=1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1, 1)
        r = m / c1 / (np.sqrt(v / c2) + eps) + weight_decay * p
        trust = 1.0
        if always_adapt or weight_decay > 0:
            trust = np.linalg.norm(p) / np.linalg.norm(r)
        p = p - lr * trust * r
        yield p, {"exp_avg": m, "exp_avg_sq": v, "step": t}


REFS = {"adagrad": (optim.Adagrad, adagrad_ref), "adadelta": (optim.Adadelta, adadelta_ref),
        "lamb": (optim.LAMB, lamb_ref)}


CASES = [
    ("adagrad", {}), ("adagrad", dict(lr=0.1, lr_decay=0.3, weight_decay=0.05)),
    ("adagrad", dict(lr=0.5, eps=1e-3, initial_accumulator_value=0.2)),
    ("adadelta", {}), ("adadelta", dict(lr=0.5, rho=0.5, eps=1e-4, weight_decay=0.1)),
    ("lamb", {}), ("lamb", dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.1)),
    ("lamb", dict(lr=0.05, always_adapt=True)),
    ("lamb", dict(lr=0.05, bias_correction=False, weight_decay=0.01, eps=1e-6)),
]


def _check_run(opt, params, grads, refs):
    """Step `opt` with `grads` and compare parameters and state with `refs` after each step."""
    for step, step_grads in enumerate(grads):
        for p, g in zip(params, step_grads):
            p.grad = eg.tensor(g)
        opt.step()
        for p, ref in zip(params, refs):
            ref_p, ref_state = ref[step]
            _close(p.numpy(), ref_p)
            assert set(opt.state[p]) == set(ref_state)
            for k, want in ref_state.items():
                _close(opt.state[p][k].numpy(), want)


@pytest.mark.parametrize("name, kw", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_adagrad_adadelta_lamb_match_reference(rng, name, kw):
    cls, ref = REFS[name]
    init, grads, params = _setup(rng)
    refs = [list(ref(p0, [g[i] for g in grads], **kw)) for i, p0 in enumerate(init)]
    _check_run(cls(params, **kw), params, grads, refs)


def test_lamb_param_groups_have_their_own_hyper_parameters(rng):
    init, grads, params = _setup(rng)
    # Without bias correction, float32's 1 - 0.999 (off by 1e-5) would show in the parameters:
    # the second group uses beta2 = 0.99.
    late = {"lr": 0.05, "bias_correction": False, "betas": (0.9, 0.99)}
    opt = optim.LAMB([{"params": [params[0]], "weight_decay": 0.1},
                      {"params": [params[1]], **late}], lr=0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.05]
    refs = [list(lamb_ref(init[0], [g[0] for g in grads], lr=0.01, weight_decay=0.1)),
            list(lamb_ref(init[1], [g[1] for g in grads], **late))]
    _check_run(opt, params, grads, refs)


def test_adagrad_adadelta_lamb_defaults_follow_megengine():
    p = eg.Parameter(eg.ones(2))
    groups = [o.param_groups[0] for o in (optim.Adagrad([p]), optim.Adadelta([p]),
                                          optim.LAMB([p]))]
    assert {k: groups[0][k] for k in ("lr", "lr_decay", "eps", "weight_decay")} == dict(
        lr=1e-2, lr_decay=0.0, eps=1e-10, weight_decay=0.0)
    assert {k: groups[1][k] for k in ("lr", "rho", "eps", "weight_decay")} == dict(
        lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0)
    assert {k: groups[2][k] for k in ("lr", "betas", "eps", "weight_decay", "bias_correction",
                                      "always_adapt")} == dict(
        lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, bias_correction=True,
        always_adapt=False)
    # MegEngine's positional order: lr, betas, eps, bias_correction, weight_decay, always_adapt
    lamb = optim.LAMB([p], 0.1, (0.8, 0.9), 1e-6, False, 0.2, True).param_groups[0]
    assert (lamb["bias_correction"], lamb["weight_decay"], lamb["always_adapt"]) == (
        False, 0.2, True)


@pytest.mark.parametrize("name", sorted(REFS))
def test_adagrad_adadelta_lamb_skip_params_without_grad(rng, name):
    init, grads, params = _setup(rng, steps=1)
    opt = REFS[name][0](params)
    params[0].grad = eg.tensor(grads[0][0])
    opt.step()
    assert not np.allclose(params[0].numpy(), init[0])
    np.testing.assert_array_equal(params[1].numpy(), init[1])
    assert all(np.all(t.numpy() == 0) for t in opt.state[params[1]].values())


@pytest.mark.parametrize("name", sorted(REFS))
def test_adagrad_adadelta_lamb_state_dict_round_trip_continues_identically(rng, name):
    cls = REFS[name][0]
    _, grads, params = _setup(rng)

    def run(opt, ps, gs):
        for step_grads in gs:
            for p, g in zip(ps, step_grads):
                p.grad = eg.tensor(g)
            opt.step()

    opt = cls(params, lr=0.05, weight_decay=0.01)
    run(opt, params, grads[:2])
    state = opt.state_dict()
    assert set(state["state"]) == {0, 1}
    clones = [eg.Parameter(p.numpy()) for p in params]
    fresh = cls(clones, lr=1.0)
    kept = {(i, k): t for i, p in enumerate(clones) for k, t in fresh.state[p].items()}
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == 0.05 and fresh.param_groups[0]["weight_decay"] == 0.01
    assert all(fresh.state[clones[i]][k] is t for (i, k), t in kept.items())
    run(opt, params, grads[2:])
    run(fresh, clones, grads[2:])
    for a, b in zip(params, clones):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for s, t in zip(opt.state.values(), fresh.state.values()):
        for k in s:
            np.testing.assert_array_equal(s[k].numpy(), t[k].numpy())


@pytest.mark.parametrize("make", [
    lambda p: optim.Adagrad([p], lr=-1.0), lambda p: optim.Adagrad([p], lr_decay=-0.1),
    lambda p: optim.Adagrad([p], eps=-1.0), lambda p: optim.Adagrad([p], weight_decay=-1.0),
    lambda p: optim.Adadelta([p], rho=1.5), lambda p: optim.Adadelta([p], lr=-1.0),
    lambda p: optim.LAMB([p], betas=(1.0, 0.9)), lambda p: optim.LAMB([p], weight_decay=-1.0),
    lambda p: optim.LAMB([p], eps=-1e-8),
], ids=["adagrad-lr", "adagrad-decay", "adagrad-eps", "adagrad-wd", "adadelta-rho",
        "adadelta-lr", "lamb-beta", "lamb-wd", "lamb-eps"])
def test_adagrad_adadelta_lamb_invalid_hyper_parameters_raise(make):
    with pytest.raises(OpArgumentError, match="must be"):
        make(eg.Parameter(eg.ones(2)))


# ----- state ------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, keys", [
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), {"momentum_buffer"}),
    (lambda ps: optim.Adam(ps), {"step", "exp_avg", "exp_avg_sq"}),
    (lambda ps: optim.AdamW(ps), {"step", "exp_avg", "exp_avg_sq"}),
], ids=["sgd", "adam", "adamw"])
def test_state_exists_before_first_step_and_keeps_identity(rng, make, keys):
    _, grads, params = _setup(rng, steps=3)
    opt = make(params)
    assert set(opt.state) == set(params)
    for p in params:
        state = opt.state[p]
        assert set(state) == keys
        for k, t in state.items():
            assert isinstance(t, eg.Tensor)
            assert t.shape == (() if k == "step" else p.shape)
            np.testing.assert_array_equal(t.numpy(), 0)
    ids = {(id(p), k): id(t) for p in params for k, t in opt.state[p].items()}
    list(_run(opt, params, grads))
    assert {(id(p), k): id(t) for p in params for k, t in opt.state[p].items()} == ids
    assert all(np.any(opt.state[p][k].numpy() != 0) for p in params for k in keys)


def test_plain_sgd_has_no_state():
    p = eg.Parameter(eg.ones(2))
    assert optim.SGD([p], lr=0.1).state[p] == {}


def test_param_groups_have_their_own_lr(rng):
    init, grads, params = _setup(rng)
    opt = optim.SGD([{"params": [params[0]], "lr": 0.5},
                     {"params": [params[1]], "momentum": 0.9}], lr=0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.01]
    assert [g["momentum"] for g in opt.param_groups] == [0.0, 0.9]
    assert opt.param_groups[0]["params"] == [params[0]]
    ref0 = list(sgd_ref(init[0], [g[0] for g in grads], 0.5))
    ref1 = list(sgd_ref(init[1], [g[1] for g in grads], 0.01, momentum=0.9))
    for step, (v0, v1) in enumerate(_run(opt, params, grads)):
        _close(v0, ref0[step])
        _close(v1, ref1[step])


def test_one_group_dict_or_one_tensor_is_taken_as_megengine_takes_it():
    # the zoo's get_parameters returns {"params": model.parameters(), "weight_decay": wd}
    params = [eg.Parameter(eg.ones(2)), eg.Parameter(eg.ones(3))]
    opt = optim.SGD({"params": iter(params), "weight_decay": 1e-4}, lr=0.1, momentum=0.9)
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["params"] == params
    assert opt.param_groups[0]["weight_decay"] == 1e-4
    assert optim.SGD(params[0], lr=0.1).param_groups[0]["params"] == [params[0]]


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_changing_lr_between_steps_takes_effect(rng, name):
    init, grads, params = _setup(rng, shapes=[(4,)], steps=4)
    lrs = [0.1, 0.01, 0.3, 0.0]
    make = {"sgd": lambda: optim.SGD(params, lr=lrs[0], momentum=0.5),
            "adam": lambda: optim.Adam(params, lr=lrs[0])}[name]
    opt = make()
    p, m, v, buf = init[0].astype(np.float64), 0.0, 0.0, 0.0
    for t, (lr, (g,)) in enumerate(zip(lrs, grads), start=1):
        opt.param_groups[0]["lr"] = lr
        _assign(params, [g])
        opt.step()
        if name == "sgd":
            buf = 0.5 * buf + g
            p = p - lr * buf
        else:
            m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
            p = p - lr / (1 - 0.9**t) * m / (np.sqrt(v) / np.sqrt(1 - 0.999**t) + 1e-8)
        _close(params[0].numpy(), p)


@pytest.mark.parametrize("make", [
    lambda ps, lr: optim.SGD(ps, lr=lr, momentum=0.9, nesterov=True),
    lambda ps, lr: optim.Adam(ps, lr=lr, betas=(0.8, 0.95)),
    lambda ps, lr: optim.AdamW(ps, lr=lr, weight_decay=0.1),
], ids=["sgd", "adam", "adamw"])
def test_state_dict_round_trip_continues_identically(rng, make):
    _, grads, params = _setup(rng)
    opt = make(params, 0.05)
    list(_run(opt, params, grads[:2]))
    state = opt.state_dict()
    assert state["param_groups"][0]["params"] == [0, 1]
    assert set(state["state"]) == {0, 1}
    assert all(isinstance(a, np.ndarray) for s in state["state"].values() for a in s.values())

    clones = [eg.Parameter(p.numpy()) for p in params]
    fresh = make(clones, 1.0)
    before = {(i, k): t for i, p in enumerate(clones) for k, t in fresh.state[p].items()}
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == 0.05
    assert all(fresh.state[clones[i]][k] is t for (i, k), t in before.items())
    for a, b in zip(_run(opt, params, grads[2:]), _run(fresh, clones, grads[2:])):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_state_dict_is_a_snapshot(rng):
    _, grads, params = _setup(rng)
    opt = optim.Adam(params, lr=0.1)
    list(_run(opt, params, grads[:1]))
    state = opt.state_dict()
    saved = state["state"][0]["exp_avg"].copy()
    list(_run(opt, params, grads[1:2]))
    np.testing.assert_array_equal(state["state"][0]["exp_avg"], saved)


def test_load_state_dict_rejects_mismatched_groups():
    a, b = eg.Parameter(eg.ones(2)), eg.Parameter(eg.ones(2))
    state = optim.SGD([a, b], lr=0.1).state_dict()
    with pytest.raises(ValueError):
        optim.SGD([a], lr=0.1).load_state_dict(state)


# ----- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize("make, error", [
    (lambda p: optim.SGD([p], lr=-0.1), ValueError),
    (lambda p: optim.SGD([p], lr=0.1, momentum=-0.5), ValueError),
    (lambda p: optim.SGD([p], lr=0.1, weight_decay=-1.0), ValueError),
    (lambda p: optim.SGD([p], lr=0.1, nesterov=True), ValueError),
    (lambda p: optim.SGD([], lr=0.1), ValueError),
    (lambda p: optim.Adam([p], lr=-1e-3), ValueError),
    (lambda p: optim.Adam([p], betas=(1.0, 0.999)), ValueError),
    (lambda p: optim.Adam([p], betas=(0.9, -0.1)), ValueError),
    (lambda p: optim.Adam([p], eps=-1.0), ValueError),
    (lambda p: optim.AdamW([p], weight_decay=-0.01), ValueError),
    (lambda p: optim.Adam([]), ValueError),
    (lambda p: optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1), ValueError),
    (lambda p: optim.SGD([p, np.ones(2)], lr=0.1), TypeError),
], ids=["sgd-lr", "sgd-momentum", "sgd-wd", "nesterov-no-momentum", "sgd-empty", "adam-lr",
        "adam-beta1", "adam-beta2", "adam-eps", "adamw-wd", "adam-empty", "duplicate-param",
        "non-tensor"])
def test_invalid_arguments_raise(make, error):
    with pytest.raises(error):
        make(eg.Parameter(eg.ones(2)))




def test_state_dicts_use_megengines_layout():
    """What MegEngine's load_state_dict reads (tests/parity checks it resumes from one): its
    group keys, a float32 step, an entry per parameter."""
    p = eg.Parameter(eg.ones(2))
    for opt, keys in ((optim.SGD([p], lr=0.1), {"lr", "momentum", "weight_decay", "params"}),
                      (optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True),
                       {"lr", "momentum", "nesterov", "weight_decay", "params"}),
                      (optim.Adam([p], lr=0.1), {"lr", "betas", "eps", "weight_decay", "params"})):
        p.grad = eg.ones(2)
        opt.step()
        state = opt.state_dict()
        assert set(state["param_groups"][0]) == keys and list(state["state"]) == [0]
        if "step" in state["state"][0]:
            assert state["state"][0]["step"].dtype == np.float32
        again = type(opt)([eg.Parameter(eg.ones(2))], lr=0.5)
        again.load_state_dict(state)
        assert again.param_groups[0]["lr"] == 0.1
