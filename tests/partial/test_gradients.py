"""Gradients cross the segment boundary exactly as they would through eager code."""

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager import BackwardError
from eager.autodiff import GradManager, no_grad
from partial import partial_trace
from tests.helpers import randn

from .differential import World, check_against_eager


def _mlp():
    return M.Sequential(M.Linear(3, 6), M.GELU(), M.Linear(6, 4))


def test_outputs_nobody_uses_get_zero_cotangents():
    def build(wrap):
        net = _mlp()
        region = wrap(lambda x: (net(x), net(x).sum(axis=1), F.argmax(net(x), axis=1)))
        gm = GradManager().attach(net.parameters())

        def step(i):
            with gm:
                feats, unused, idx = region(randn(5, 3, seed=i))
                gm.backward(feats[:, :2].sum())
            net.zero_grad() if i < 2 else None
            return feats, unused, idx

        return World(step, modules=[net])

    check_against_eager(build)


def test_shared_weights_called_twice_keep_their_own_residuals():
    def build(wrap):
        net = _mlp()
        region = wrap(lambda x: F.tanh(net(x)))
        gm = GradManager().attach(net.parameters())

        def step(i):
            with gm:
                a = region(randn(4, 3, seed=i))
                b = region(randn(4, 3, seed=i + 10))
                loss = (a * b).sum() + (a**2).mean()
                gm.backward(loss)
            return loss

        return World(step, modules=[net])

    check_against_eager(build)


def test_gradient_callbacks_see_the_same_gradients_as_eager():
    seen = {"eager": [], "compiled": []}

    def build(wrap):
        net = _mlp()
        mode = "eager" if wrap(len) is len else "compiled"
        region = wrap(lambda x: net(x))

        def clip(p, g):
            seen[mode].append(g.numpy())
            return F.clip(g * 0.5, -0.01, 0.01)

        gm = GradManager().attach(net.parameters(), callbacks=[clip])

        def step(i):
            with gm:
                gm.backward(region(randn(4, 3, seed=i)).sum())
            return [p.grad for p in net.parameters()]

        return World(step, modules=[net])

    check_against_eager(build)
    assert len(seen["eager"]) == len(seen["compiled"]) > 0
    for a, b in zip(seen["compiled"], seen["eager"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_without_a_recording_manager_only_the_inference_forward_runs():
    net = _mlp()
    region = partial_trace(lambda x: net(x))
    y = region(randn(2, 3))
    entry_exes = region._cache.most_recent().segment.executables()
    assert list(entry_exes) == ["forward"]
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward(region(randn(2, 3)).sum())  # now the vjp pair is built
    assert len(region._cache.most_recent().segment.executables()) == 3
    with no_grad():
        gm.record()
        z = region(randn(2, 3))
        gm.release()
    assert eg.hooks.history(z) == (None, 0) and eg.hooks.history(y) == (None, 0)


def test_inputs_that_need_no_gradient_get_none_and_cost_nothing():
    w = eg.Parameter([1.0, 2.0])
    c = eg.tensor([3.0, 4.0])
    region = partial_trace(lambda x: x * w + c)
    gm = GradManager().attach([w])
    with gm:
        gm.backward(region(eg.tensor([1.0, 1.0])).sum())
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0])
    assert c.grad is None
    (fwd_bwd,) = [k for k in region._cache.most_recent().segment.executables() if "backward" in k]
    assert "wrt=(1,)" in fwd_bwd  # only w is differentiated


def test_detach_and_no_grad_inside_the_region_cut_gradients_as_eagerly():
    def build(wrap):
        w = eg.Parameter([0.5, -1.0, 2.0])

        def region(x):
            scale = (w * w).detach()
            with no_grad():
                shift = w.sum()
            return x * w * scale + shift * w

        region = wrap(region)
        gm = GradManager().attach([w])

        def step(i):
            w.grad = None
            with gm:
                gm.backward(region(randn(3, seed=i)).sum())
            return w.grad

        return World(step, tensors={"w": w})

    check_against_eager(build)


def test_eager_ops_before_and_after_the_segment_and_attached_inputs():
    def build(wrap):
        pre = eg.Parameter(randn(4, 3).numpy())
        net = _mlp()
        region = wrap(lambda h, k: (net(h) * k, k.sum()))
        gm = GradManager().attach(net.parameters() + [pre])

        def step(i):
            pre.grad = None
            net.zero_grad()
            with gm:
                h = F.relu(pre * 2 - 0.1)  # eager history flows into the segment
                y, s = region(h, eg.tensor(float(i + 1)))
                loss = (F.softmax(y, axis=1)[:, 0] * s).sum()
                gm.backward(loss)
            return loss, pre.grad

        return World(step, modules=[net], tensors={"pre": pre})

    check_against_eager(build)


def test_setitem_inside_the_region_keeps_gradient_history():
    def build(wrap):
        w = eg.Parameter([1.0, 2.0, 3.0])

        def region(buf):
            buf[1:] = w[:2] * 3
            return buf * w

        region = wrap(region)
        gm = GradManager().attach([w])

        def step(i):
            w.grad = None
            buf = eg.zeros(3)
            with gm:
                y = region(buf)
                gm.backward((y + buf).sum())  # uses the written-back buf too
            return y, buf, w.grad

        return World(step, tensors={"w": w})

    check_against_eager(build)


def test_a_second_backward_through_a_segment_raises():
    w = eg.Parameter([1.0])
    region = partial_trace(lambda x: x * w)
    gm = GradManager().attach([w])
    with gm:
        y = region(eg.tensor([2.0]))
        gm.backward(y.sum())
    gm.record()
    with pytest.raises(BackwardError, match="freed"):
        gm.backward((y * 2).sum())
    gm.release()


# ----- outputs the loss does not reach ------------------------------------------------------------
@pytest.mark.parametrize("make_opt", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01),
], ids=["sgd-momentum-wd", "adam"])
def test_parameters_that_only_feed_an_unused_output_get_no_gradient(make_opt):
    def build(wrap):
        trunk, head_a, head_b = M.Linear(4, 5), M.Linear(5, 3), M.Linear(5, 2)
        net = M.Sequential(trunk, head_a, head_b)  # for the snapshot only
        params = net.parameters()
        opt = make_opt(params)
        gm = GradManager().attach(params)

        @wrap
        def region(x):
            h = F.relu(trunk(x))
            return head_a(h), head_b(h)

        def step(i):
            opt.clear_grad()  # first: the last step's .grad stays for the snapshot to compare
            with gm:
                a, b = region(randn(6, 4, seed=i))
                gm.backward((a ** 2).mean())  # b (and so head_b) is not part of the loss
            no_grad = [p.grad is None for p in params]  # head_b's: True, as in eager
            opt.step()
            return no_grad, a, b

        return World(step, modules=[net], optimizers=[opt])

    check_against_eager(build, steps=3)
