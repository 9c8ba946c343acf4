"""Tests for `eager.optimizer`: SGD (momentum, Nesterov, weight decay), Adam and AdamW stepped
with fixed gradients against hand-written float64 numpy updates (PyTorch semantics), optimizer
state and param groups, state dicts, validation, and the LR schedulers against closed forms.
"""

import math

import numpy as np
import pytest

import eager as eg
import eager.optimizer as optim
from eager.optimizer import lr_scheduler

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


# ----- LR schedulers ----------------------------------------------------------------------------
SCHEDULES = {
    "step": (lambda opt: lr_scheduler.StepLR(opt, step_size=3, gamma=0.5),
             lambda base, e: base * 0.5 ** (e // 3)),
    "multistep": (lambda opt: lr_scheduler.MultiStepLR(opt, milestones=[6, 2, 9], gamma=0.1),
                  lambda base, e: base * 0.1 ** sum(e >= m for m in (2, 6, 9))),
    "cosine": (lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=8, eta_min=0.001),
               lambda base, e: 0.001 + (base - 0.001) * (1 + math.cos(math.pi * e / 8)) / 2),
    "lambda": (lambda opt: lr_scheduler.LambdaLR(opt, lambda e: 1 / (1 + e)),
               lambda base, e: base / (1 + e)),
}


def _two_group_sgd():
    a, b = eg.Parameter(eg.ones(2)), eg.Parameter(eg.ones(3))
    return optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.4}], lr=0.1, momentum=0.9)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_scheduler_matches_closed_form(name):
    make, ref = SCHEDULES[name]
    opt = _two_group_sgd()
    sched = make(opt)
    assert sched.last_epoch == 0
    for epoch in range(12):
        if epoch:
            sched.step()
        expected = [ref(0.1, epoch), ref(0.4, epoch)]
        assert sched.last_epoch == epoch
        assert sched.get_last_lr() == pytest.approx(expected, rel=1e-12)
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(expected, rel=1e-12)


def test_lambda_lr_with_one_function_per_group():
    opt = _two_group_sgd()
    sched = lr_scheduler.LambdaLR(opt, [lambda e: 0.5**e, lambda e: e + 1])
    for _ in range(3):
        sched.step()
    assert sched.get_last_lr() == pytest.approx([0.1 * 0.5**3, 0.4 * 4])
    with pytest.raises(ValueError):
        lr_scheduler.LambdaLR(opt, [lambda e: 1.0])


def test_scheduler_lr_drives_the_optimizer_update():
    p = eg.Parameter(eg.zeros(1))
    opt = optim.SGD([p], lr=1.0)
    sched = lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
    expected = 0.0
    for epoch in range(5):
        p.grad = eg.ones(1)
        opt.step()
        expected -= 0.1 ** (epoch // 2)
        sched.step()
    np.testing.assert_allclose(p.numpy(), [expected], rtol=1e-6)


def test_a_scheduler_subclass_may_override_get_lr_as_in_megengine():
    class Halving(optim.LRScheduler):
        def __init__(self, optimizer, every, current_epoch=-1):
            self.every = every
            super().__init__(optimizer, current_epoch)

        def get_lr(self):
            return [b * 0.5 ** (self.current_epoch // self.every) for b in self.base_lrs]

    opt = _two_group_sgd()
    sched = Halving(opt, 2)
    lrs = [sched.get_last_lr()] + [sched.step() or sched.get_last_lr() for _ in range(4)]
    assert lrs == [[0.1, 0.4], [0.1, 0.4], [0.05, 0.2], [0.05, 0.2], [0.025, 0.1]]
    assert sched.state_dict() == {"every": 2, "current_epoch": 4}


def test_schedulers_load_megengine_and_pytorch_state_dicts():
    """MegEngine saves `current_epoch`, PyTorch `last_epoch` plus private bookkeeping."""
    sched = optim.MultiStepLR(_two_group_sgd(), [2, 4])
    sched.load_state_dict({"milestones": [2, 4], "gamma": 0.1, "current_epoch": 3})
    assert sched.current_epoch == sched.last_epoch == 3
    sched.step()
    assert sched.get_last_lr() == pytest.approx([0.001, 0.004])
    sched = optim.MultiStepLR(_two_group_sgd(), [2, 4])
    sched.load_state_dict({"milestones": [2, 4], "gamma": 0.1, "last_epoch": 1,
                           "base_lrs": [0.1, 0.4], "_step_count": 2, "_last_lr": [0.1, 0.4]})
    sched.step()
    assert sched.current_epoch == 2 and sched.get_last_lr() == pytest.approx([0.01, 0.04])


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_scheduler_state_dict_round_trip(name):
    make, ref = SCHEDULES[name]
    opt = _two_group_sgd()
    sched = make(opt)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    assert "optimizer" not in state and state["current_epoch"] == 4

    other_opt = _two_group_sgd()
    other = make(other_opt)
    other.load_state_dict(state)
    assert other.last_epoch == 4
    for epoch in range(5, 8):
        sched.step()
        other.step()
        assert other.get_last_lr() == pytest.approx([ref(0.1, epoch), ref(0.4, epoch)])
        assert other.get_last_lr() == sched.get_last_lr()


def test_scheduler_keeps_initial_lr_as_base():
    opt = _two_group_sgd()
    lr_scheduler.StepLR(opt, step_size=1, gamma=0.5).step()
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.4]
    sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    assert sched.base_lrs == [0.1, 0.4]
    assert sched.get_last_lr() == pytest.approx([0.1, 0.4])


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
