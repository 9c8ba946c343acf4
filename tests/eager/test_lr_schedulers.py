"""Tests for Adagrad, Adadelta and LAMB (stepped with fixed gradients against float64 numpy
versions of MegEngine's rules: parameters and state), gradient clipping, and the schedulers
ExponentialLR, LinearLR, LinearWarmup and OneCycleLR (against hand-computed lr sequences);
each optimizer and each clipping function inside `xla_trace` agrees with eager code.

The update ops themselves are tested in tests/eager/test_ops_updates.py."""

import math

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.errors import OpArgumentError, OpTypeError
from eager.optimizer import lr_scheduler
from partial import xla_trace
from tests.partial.differential import World, check_against_eager

from .test_optimizers import ATOL, RTOL, SHAPES, STEPS, _close, _setup  # noqa: F401


# ----- numpy references (float64), one parameter; each yields (param, state) per step ------------
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
def test_matches_reference(rng, name, kw):
    cls, ref = REFS[name]
    init, grads, params = _setup(rng)
    refs = [list(ref(p0, [g[i] for g in grads], **kw)) for i, p0 in enumerate(init)]
    _check_run(cls(params, **kw), params, grads, refs)


def test_param_groups_have_their_own_hyper_parameters(rng):
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


def test_defaults_follow_megengine():
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
def test_params_without_grad_are_skipped(rng, name):
    init, grads, params = _setup(rng, steps=1)
    opt = REFS[name][0](params)
    params[0].grad = eg.tensor(grads[0][0])
    opt.step()
    assert not np.allclose(params[0].numpy(), init[0])
    np.testing.assert_array_equal(params[1].numpy(), init[1])
    assert all(np.all(t.numpy() == 0) for t in opt.state[params[1]].values())


@pytest.mark.parametrize("name", sorted(REFS))
def test_state_dict_round_trip_continues_identically(rng, name):
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
def test_invalid_hyper_parameters_raise(make):
    with pytest.raises(OpArgumentError, match="must be"):
        make(eg.Parameter(eg.ones(2)))


# ----- gradient clipping ------------------------------------------------------------------------
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
        _close(p.grad.numpy(), g * 0.5 / (total + 1e-6))
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


# ----- inside xla_trace -------------------------------------------------------------------------
def _data(i):
    rng = np.random.default_rng(i)
    return (eg.tensor(rng.standard_normal((6, 8)).astype(np.float32)),
            eg.tensor(rng.integers(0, 4, 6).astype(np.int32)))


def _training(make_opt, clip=None):
    """A `build` for check_against_eager: an MLP trained for a few steps, lr changed at step 2
    (an input of the compiled step: no recompilation)."""
    def build(wrap):
        net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 4))
        opt = make_opt(net.parameters())
        gm = GradManager().attach(net.parameters())

        @wrap
        def step(x, y):
            with gm:
                loss = F.cross_entropy(net(x), y)
                gm.backward(loss)
            norm = clip(net.parameters()) if clip else None
            opt.step().clear_grad()
            return loss, norm

        def run(i):
            if i == 2:
                opt.param_groups[0]["lr"] *= 0.5
            return step(*_data(i))

        return World(run, modules=[net], optimizers=[opt], traced=[step])

    return build


@pytest.mark.parametrize("make", [
    lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.1, weight_decay=0.01),
    lambda ps: optim.Adadelta(ps, lr=1.0, weight_decay=0.01),
    lambda ps: optim.LAMB(ps, lr=0.05, weight_decay=0.01),
], ids=["adagrad", "adadelta", "lamb"])
def test_optimizers_in_xla_trace_match_eager(make):
    world = check_against_eager(_training(make), steps=3, compile=xla_trace)
    assert world.traced[0].cache_info().captures == 1


@pytest.mark.parametrize("clip", [
    lambda ps: optim.clip_grad_norm(ps, max_norm=0.05),
    lambda ps: optim.clip_grad_value(ps, -0.01, 0.02),
], ids=["norm", "value"])
def test_clipping_in_xla_trace_matches_eager(clip):
    world = check_against_eager(_training(lambda ps: optim.SGD(ps, lr=0.5, momentum=0.9), clip),
                                steps=3, compile=xla_trace)
    assert world.traced[0].cache_info().captures == 1


def test_compiled_update_clips_gradients_computed_eagerly():
    """Backward in eager code, clipping and LAMB in an `xla_trace` step: the lifted `.grad`
    Tensors are rebound in place, as in eager code (a reference held outside sees the clip)."""
    def build(wrap):
        net = M.Linear(4, 3)
        opt = optim.LAMB(net.parameters(), lr=0.1, weight_decay=0.01)
        gm = GradManager().attach(net.parameters())

        @wrap
        def update():
            norm = optim.clip_grad_norm(net.parameters(), 0.1)
            optim.clip_grad_value(net.parameters(), -0.01, 0.01)
            opt.step()
            return norm

        def run(i):
            with gm:
                gm.backward((net(_data(i)[0][:, :4]) ** 2).mean())
            held = net.weight.grad
            norm = update()
            opt.clear_grad()
            return norm, held

        return World(run, modules=[net], optimizers=[opt], traced=[update])

    world = check_against_eager(build, steps=3, compile=xla_trace)
    assert world.traced[0].cache_info().captures == 1


def test_one_cycle_schedule_around_an_xla_trace_step_never_recompiles():
    def make(ps):
        opt = optim.Adam(ps, lr=1e-3)
        make.sched = optim.OneCycleLR(opt, max_lr=0.1, total_steps=6)
        return opt

    def build(wrap):
        world = _training(make)(wrap)
        inner = world.step

        def run(i):
            out = inner(i)
            make.sched.step()  # lr and beta1 change every step
            return out

        world.step = run
        return world

    world = check_against_eager(build, steps=4, compile=xla_trace)
    assert world.traced[0].cache_info().captures == 1


# ----- schedulers -------------------------------------------------------------------------------
def _sgd(lrs=(0.1, 0.4), momentum=0.9):
    groups = [{"params": [eg.Parameter(eg.ones(2))], "lr": lr} for lr in lrs]
    return optim.SGD(groups, lr=lrs[0], momentum=momentum)


def _lrs(sched, steps):
    """The lr of each group at epochs 0 .. steps - 1."""
    out = [sched.get_last_lr()]
    for _ in range(steps - 1):
        sched.step()
        out.append(sched.get_last_lr())
    return out


def test_every_scheduler_is_importable_from_the_optimizer_package():
    for name in ("LRScheduler", "StepLR", "MultiStepLR", "CosineAnnealingLR", "LambdaLR",
                 "ExponentialLR", "LinearLR", "LinearWarmup", "OneCycleLR"):
        assert getattr(optim, name) is getattr(lr_scheduler, name)
        assert name in optim.__all__


def test_exponential_lr():
    got = _lrs(optim.ExponentialLR(_sgd(), gamma=0.5), 4)
    np.testing.assert_allclose(got, [[0.1, 0.4], [0.05, 0.2], [0.025, 0.1], [0.0125, 0.05]],
                               rtol=1e-12)


def test_linear_lr():
    got = _lrs(optim.LinearLR(_sgd((1.0,)), start_factor=0.25, total_iters=3), 6)
    np.testing.assert_allclose(got, [[0.25], [0.5], [0.75], [1.0], [1.0], [1.0]], rtol=1e-12)
    defaults = _lrs(optim.LinearLR(_sgd((0.3,))), 7)
    assert [g[0] for g in defaults] == pytest.approx(
        [0.1, 0.14, 0.18, 0.22, 0.26, 0.3, 0.3])


def test_linear_warmup_of_the_base_lr():
    got = _lrs(optim.LinearWarmup(_sgd((0.1, 0.4)), warmup_steps=4, start_factor=0.2), 6)
    np.testing.assert_allclose(got, [[0.02, 0.08], [0.04, 0.16], [0.06, 0.24], [0.08, 0.32],
                                     [0.1, 0.4], [0.1, 0.4]], rtol=1e-12)


def test_linear_warmup_in_front_of_a_multistep_schedule():
    """The warm-up factor multiplies the wrapped schedule, whose milestones count from 0."""
    opt = _sgd((1.0,))
    sched = optim.LinearWarmup(optim.MultiStepLR(opt, milestones=[2, 5], gamma=0.1),
                               warmup_steps=3, start_factor=0.4)
    assert [g[0] for g in _lrs(sched, 7)] == pytest.approx(
        [0.4, 0.6, 0.08, 0.1, 0.1, 0.01, 0.01])
    assert sched.scheduler.last_epoch == sched.last_epoch == 6
    with pytest.raises(OpArgumentError, match="warmup_steps"):
        optim.LinearWarmup(opt, warmup_steps=-1)


def test_linear_warmup_state_dict_round_trip():
    def make():
        return optim.LinearWarmup(optim.CosineAnnealingLR(_sgd(), T_max=10), warmup_steps=4)

    sched = make()
    for _ in range(2):
        sched.step()
    state = sched.state_dict()
    assert "optimizer" not in state and state["scheduler"]["current_epoch"] == 2
    other = make()
    other.load_state_dict(state)
    assert other.last_epoch == other.scheduler.last_epoch == 2
    for _ in range(4):
        sched.step()
        other.step()
        assert other.get_last_lr() == pytest.approx(sched.get_last_lr())


def _one_cycle_linear(max_lr):
    """The linear 1cycle over 10 steps with pct_start 0.3, by hand: 0.04 -> 1 over steps 0..2
    (div_factor 25), then 1 -> 4e-6 over steps 2..9 (final_div_factor 1e4)."""
    up = [0.04, 0.52, 1.0]
    down = [1.0 + (4e-6 - 1.0) * k / 7 for k in range(1, 8)]
    return [max_lr * v for v in up + down]


def test_one_cycle_linear_lr_and_momentum():
    opt = _sgd((0.1, 0.4))
    sched = optim.OneCycleLR(opt, max_lr=[1.0, 2.0], total_steps=10, anneal_strategy="linear")
    lrs, momenta = [], []
    for epoch in range(10):
        if epoch:
            sched.step()
        lrs.append(sched.get_last_lr())
        momenta.append(opt.param_groups[0]["momentum"])
    assert [g[0] for g in lrs] == pytest.approx(_one_cycle_linear(1.0))
    assert [g[1] for g in lrs] == pytest.approx(_one_cycle_linear(2.0))
    assert momenta == pytest.approx([0.95, 0.9, 0.85] + [0.85 + 0.1 * k / 7 for k in range(1, 8)])
    assert [g["initial_lr"] for g in opt.param_groups] == pytest.approx([0.04, 0.08])
    sched.step()  # step 10 == total_steps is still allowed (PyTorch), step 11 is not
    with pytest.raises(OpArgumentError, match="total_steps"):
        sched.step()


def test_one_cycle_cosine_and_three_phase():
    cos = [g[0] for g in _lrs(optim.OneCycleLR(_sgd((0.1,)), 1.0, total_steps=10,
                                               cycle_momentum=False), 10)]
    # step 1 is halfway up; step 3 is 1/7 of the way down a half cosine from 1 to 4e-6
    assert cos[:3] == pytest.approx([0.04, 0.52, 1.0])
    assert cos[3] == pytest.approx(4e-6 + (1 - 4e-6) * (1 + math.cos(math.pi / 7)) / 2)
    assert cos[9] == pytest.approx(4e-6)
    three = [g[0] for g in _lrs(optim.OneCycleLR(
        _sgd((0.1,)), 1.0, epochs=2, steps_per_epoch=5, pct_start=0.3, anneal_strategy="linear",
        three_phase=True, cycle_momentum=False), 10)]
    # up over steps 0..2, down to 0.04 over 2..4, then to 4e-6 over 4..9
    assert three == pytest.approx([0.04, 0.52, 1.0, 0.52, 0.04]
                                  + [0.04 + (4e-6 - 0.04) * k / 5 for k in range(1, 6)])


def test_one_cycle_cycles_adam_beta1_and_needs_momentum_to_cycle():
    opt = optim.Adam([eg.Parameter(eg.ones(2))], betas=(0.9, 0.99))
    sched = optim.OneCycleLR(opt, max_lr=0.01, total_steps=4, pct_start=0.5)
    assert opt.param_groups[0]["betas"] == pytest.approx((0.95, 0.99))
    sched.step()
    assert opt.param_groups[0]["betas"] == pytest.approx((0.85, 0.99))
    with pytest.raises(OpArgumentError, match="cycle_momentum=False"):
        optim.OneCycleLR(optim.Adagrad([eg.Parameter(eg.ones(2))]), 0.1, total_steps=5)
    with pytest.raises(OpArgumentError, match="total_steps"):
        optim.OneCycleLR(opt, 0.1)
    with pytest.raises(OpArgumentError, match="anneal_strategy"):
        optim.OneCycleLR(opt, 0.1, total_steps=5, anneal_strategy="cosine")


@pytest.mark.parametrize("make", [
    lambda opt: optim.ExponentialLR(opt, gamma=0.7),
    lambda opt: optim.LinearLR(opt, start_factor=0.1, total_iters=4),
    lambda opt: optim.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=12),
    lambda opt: optim.LinearWarmup(optim.MultiStepLR(opt, [3, 6]), warmup_steps=2),
], ids=["exponential", "linear", "one-cycle", "warmup"])
def test_scheduler_state_dict_round_trip(make):
    opt = _sgd()
    sched = make(opt)
    for _ in range(3):
        sched.step()
    state = sched.state_dict()
    assert "optimizer" not in state and state["current_epoch"] == 3
    other_opt = _sgd()
    other = make(other_opt)
    other.load_state_dict(state)
    for _ in range(5):
        sched.step()
        other.step()
        assert other.get_last_lr() == pytest.approx(sched.get_last_lr())
        assert other_opt.param_groups[0]["momentum"] == pytest.approx(
            opt.param_groups[0]["momentum"])
