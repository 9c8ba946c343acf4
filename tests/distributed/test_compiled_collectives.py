"""Per-rank collectives inside compiled regions, in this one process (a group of one rank): the
region is compiled per rank (`xla_segments.PerRank`) and equals eager code; a region with
graph breaks refuses them clearly and changes nothing. The 2-process checks, against numpy and
against one process on the whole batch, are in `test_per_rank.py`."""

from __future__ import annotations

import numpy as np
import pytest

import eager as eg
import eager.distributed as dist
from eager.autodiff import GradManager
from partial import UnsupportedInRegionError, exclude_from_trace, partial_trace, xla_trace

# Long runs (stateful machines over thousands of steps, launches of several processes): the
# README's test command leaves them out (-m "not slow"), .ci/run runs them too.
pytestmark = pytest.mark.slow


def _params() -> eg.Parameter:
    return eg.Parameter(np.array([0.5, -1.0, 2.0], np.float32))


def _region(w: eg.Parameter):
    def region(x):
        y = dist.functional.all_reduce_sum(x * w)
        return (dist.functional.all_gather(y) ** 2).sum()
    return region


def test_a_region_with_a_collective_is_compiled_per_rank_and_equals_eager():
    x = eg.tensor([1.0, 2.0, 3.0])
    grads = []
    for compiled in (False, True):
        w = _params()
        gm = GradManager().attach([w])
        f = partial_trace(_region(w)) if compiled else _region(w)
        with gm:
            loss = f(x)
            gm.backward(loss)
        grads.append((loss.numpy(), w.grad.numpy()))
    np.testing.assert_allclose(grads[1][0], grads[0][0], rtol=1e-6)
    np.testing.assert_allclose(grads[1][1], grads[0][1], rtol=1e-6)
    assert [s.options.per_rank is not None for s in f.segments()] == [True]
    assert f.segments()[0].options.per_rank.mesh is dist.rank_mesh()


def test_a_region_without_collectives_is_not_per_rank():
    f = partial_trace(lambda x: x * 2)
    f(eg.tensor([1.0]))
    assert f.segments()[0].options.per_rank is None


def _train(mode: str) -> tuple:
    w = _params()
    gm = GradManager().attach([w], callbacks=[dist.make_allreduce_cb("mean")])
    opt = eg.optimizer.SGD([w], lr=0.1, momentum=0.9)

    def step(x):
        with gm:
            loss = (x * w).sum() ** 2
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    step = xla_trace(step) if mode == "xla_trace" else step
    losses = [step(eg.tensor([1.0, 2.0, float(i)])).numpy() for i in range(3)]
    return losses, w.numpy(), step


def test_an_xla_trace_step_with_an_allreduce_callback_equals_eager():
    want_losses, want_w, _ = _train("eager")
    losses, w, step = _train("xla_trace")
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    np.testing.assert_allclose(w, want_w, rtol=1e-6)
    assert step.cache_info().captures == 1
    assert step.segments()[0].options.per_rank is not None


@pytest.mark.parametrize("where", ["before the break", "after the break", "value read"])
def test_a_collective_in_a_region_with_breaks_is_refused_and_changes_nothing(where):
    w = _params()
    gm = GradManager().attach([w])

    @partial_trace(graph_breaks=where == "value read")
    def f(x):
        if where == "after the break":
            with exclude_from_trace():
                pass
        y = dist.functional.all_reduce_sum(x * w)
        if where == "before the break":
            with exclude_from_trace():
                pass
        return y if y.sum() > 0 else -y

    for _ in range(2):  # the first call (a capture) and a later one
        with gm, pytest.raises(UnsupportedInRegionError, match="per-rank collective "
                               "dist.all_reduce_sum runs in a partial_trace region that has "
                               "graph breaks"):
            gm.backward(f(eg.tensor([1.0, 2.0, 3.0])).sum())
        assert w.grad is None and w.numpy().tolist() == [0.5, -1.0, 2.0]
