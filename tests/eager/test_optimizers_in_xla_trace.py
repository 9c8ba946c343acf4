"""Adagrad, Adadelta, LAMB and gradient clipping inside an `xla_trace` training step, the update
alone compiled after an eager backward, and a OneCycle schedule around a compiled step: each
against the same steps run eagerly (`check_against_eager`), and compiled once."""

import pytest

import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import xla_trace
from tests.helpers import labelled_batch
from tests.partial.differential import World, check_against_eager


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
            return step(*labelled_batch(i))

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
                gm.backward((net(labelled_batch(i)[0][:, :4]) ** 2).mean())
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
