"""`megengine.optimizer`: update rules checked by hand, chaining, param groups, schedulers and
state dicts."""

import numpy as np

import eager as mge
import eager.optimizer as optim
from eager.autodiff import GradManager


def _step(opt, params, grads):
    for p, g in zip(params, grads):
        p.grad = mge.tensor(np.asarray(g, np.float32))
    return opt.step()


def test_sgd_momentum_and_weight_decay():
    w = mge.Parameter([1.0, 2.0])
    opt = optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
    ref, buf = np.array([1.0, 2.0]), np.zeros(2)
    for g in ([0.5, -1.0], [0.2, 0.3], [-0.4, 0.1]):
        _step(opt, [w], [g]).clear_grad()
        buf = 0.9 * buf + (np.array(g) + 0.01 * ref)
        ref = ref - 0.1 * buf
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5)


def test_sgd_nesterov():
    w = mge.Parameter([1.0])
    opt = optim.SGD([w], lr=0.1, momentum=0.5, nesterov=True)
    ref, buf = 1.0, 0.0
    for g in (2.0, 1.0):
        _step(opt, [w], [[g]]).clear_grad()
        buf = 0.5 * buf + g
        ref -= 0.1 * (g + 0.5 * buf)
        np.testing.assert_allclose(w.numpy(), [ref], rtol=1e-6)


def test_adam_matches_hand_computation():
    w = mge.Parameter([1.0, -1.0])
    opt = optim.Adam([w], lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    ref, m, v = np.array([1.0, -1.0]), np.zeros(2), np.zeros(2)
    for t, g in enumerate(([0.1, -0.2], [0.3, 0.4], [-0.5, 0.6]), start=1):
        _step(opt, [w], [g]).clear_grad()
        g = np.array(g)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        ref = ref - 0.01 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
        np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5)


def test_adamw_decouples_weight_decay():
    w = mge.Parameter([2.0])
    opt = optim.AdamW([w], lr=0.1, weight_decay=0.5)
    _step(opt, [w], [[0.0]])
    # a zero gradient leaves only the decoupled decay: p -= lr * wd * p
    np.testing.assert_allclose(w.numpy(), [2.0 - 0.1 * 0.5 * 2.0], rtol=1e-6)


def test_step_and_clear_grad_chain():
    w = mge.Parameter([1.0])
    opt = optim.SGD([w], lr=1.0)
    gm = GradManager().attach([w])
    with gm:
        gm.backward((w * 3).sum())
    assert opt.step().clear_grad() is opt
    assert w.grad is None
    np.testing.assert_allclose(w.numpy(), [-2.0])


def test_param_groups_have_their_own_lr():
    a, b = mge.Parameter([1.0]), mge.Parameter([1.0])
    opt = optim.SGD([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    _step(opt, [a, b], [[1.0], [1.0]])
    np.testing.assert_allclose(a.numpy(), [0.5])
    np.testing.assert_allclose(b.numpy(), [0.9])
    opt.param_groups[1]["lr"] = 1.0     # changing lr between steps takes effect
    _step(opt, [a, b], [[0.0], [1.0]])
    np.testing.assert_allclose(b.numpy(), [-0.1], rtol=1e-6)


def test_parameters_without_grad_are_skipped():
    a, b = mge.Parameter([1.0]), mge.Parameter([1.0])
    opt = optim.SGD([a, b], lr=1.0)
    a.grad = mge.tensor([1.0])
    opt.step()
    np.testing.assert_array_equal(a.numpy(), [0.0])
    np.testing.assert_array_equal(b.numpy(), [1.0])


def test_multistep_lr():
    opt = optim.SGD([mge.Parameter([1.0])], lr=1.0)
    sched = optim.MultiStepLR(opt, milestones=[2, 4], gamma=0.1)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    np.testing.assert_allclose(lrs, [1.0, 1.0, 0.1, 0.1, 0.01, 0.01])


def test_step_lr_and_lambda_lr():
    opt = optim.SGD([mge.Parameter([1.0])], lr=1.0)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    np.testing.assert_allclose(lrs, [1.0, 1.0, 0.5, 0.5, 0.25])
    opt2 = optim.SGD([mge.Parameter([1.0])], lr=2.0)
    lam = optim.LambdaLR(opt2, lambda epoch: 1.0 / (epoch + 1))
    lam.step()
    lam.step()
    np.testing.assert_allclose(opt2.param_groups[0]["lr"], 2.0 / 3)


def test_optimizer_state_dict_round_trip():
    w1 = mge.Parameter([1.0, 2.0])
    opt1 = optim.SGD([w1], lr=0.1, momentum=0.9)
    _step(opt1, [w1], [[1.0, 1.0]]).clear_grad()
    w2 = mge.Parameter(w1.numpy())
    opt2 = optim.SGD([w2], lr=0.5, momentum=0.9)
    opt2.load_state_dict(opt1.state_dict())
    assert opt2.param_groups[0]["lr"] == 0.1
    _step(opt1, [w1], [[1.0, 1.0]])
    _step(opt2, [w2], [[1.0, 1.0]])
    np.testing.assert_allclose(w2.numpy(), w1.numpy())   # the momentum buffer came along


def test_clip_grad_norm_and_value():
    a, b = mge.Parameter([0.0, 0.0]), mge.Parameter([0.0])
    a.grad, b.grad = mge.tensor([3.0, 0.0]), mge.tensor([4.0])
    norm = optim.clip_grad_norm([a, b], max_norm=1.0)
    np.testing.assert_allclose(norm.numpy(), 5.0, rtol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.8], rtol=1e-5)
    optim.clip_grad_value([a, b], lower=-0.7, upper=0.7)
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.7], rtol=1e-6)


def test_schedulers_take_megengines_current_epoch():
    w = mge.Parameter(np.ones(1, np.float32))
    opt = optim.SGD([w], lr=1.0)
    sched = optim.MultiStepLR(opt, [2, 4], gamma=0.1, current_epoch=-1)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    np.testing.assert_allclose(lrs, [1.0, 1.0, 0.1, 0.1, 0.01])
    assert sched.current_epoch == 5
