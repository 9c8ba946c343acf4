"""The learning-rate schedulers: StepLR, MultiStepLR, CosineAnnealingLR and LambdaLR against
closed forms, ExponentialLR, LinearLR, LinearWarmup and OneCycleLR against hand-computed lr (and
momentum) sequences, the lr driving the optimizer's update, subclasses overriding `get_lr` as in
MegEngine, and state dicts (their own round trip, MegEngine's and PyTorch's layouts). A schedule
around an `xla_trace` step is in test_optimizers_in_xla_trace.py."""

import math

import numpy as np
import pytest

import eager as eg
import eager.optimizer as optim
from eager.core.errors import OpArgumentError
from eager.optimizer import lr_scheduler

# ----- StepLR, MultiStepLR, CosineAnnealingLR, LambdaLR: closed forms, state dicts ----------------
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


# ----- ExponentialLR, LinearLR, LinearWarmup, OneCycleLR: hand-computed sequences ----------------
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
def test_newer_scheduler_state_dict_round_trip(make):
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
