"""`eager.profile()`: every kind of work a step does lands in its kind, once, exclusively, in
the thread that did it; the profiled step computes what the unprofiled one does."""

import threading
import time

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.core import profiling
from partial import partial_trace, xla_trace


def _model(width: int):
    eg.random.seed(0)
    backbone = M.Sequential(M.Linear(6, width), M.ReLU(), M.Linear(width, width))
    head = M.Linear(width, 3)
    params = list(backbone.parameters()) + list(head.parameters())
    return backbone, head, GradManager().attach(params), optim.SGD(params, lr=0.1)


def _step(backbone, head, gm, opt, x, y):
    with gm:
        loss = F.cross_entropy(head(backbone(eg.tensor(x))), eg.tensor(y))
        gm.backward(loss)
    opt.step().clear_grad()
    return loss.item()


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(4, 6)).astype("float32"), np.array([0, 1, 2, 0], "int32")


def test_an_eager_step_splits_into_ops_backward_syncs_and_transfers():
    model = _model(5)
    x, y = _data()
    _step(*model, x, y)  # compiles the ops
    with eg.profile() as prof:
        loss = _step(*model, x, y)
    kinds = prof.kinds
    assert kinds["eager forward"].calls >= 6  # linear x3, relu, cross_entropy, the SGD update
    assert kinds["eager backward"].calls >= 5
    assert kinds["host sync"].calls == 1 and prof.names[("host sync", ".item()")].calls == 1
    assert kinds["transfer"].calls == 2  # x and y
    assert kinds["compiled forward"].calls == kinds["compiled backward"].calls == 0
    assert ("eager forward", "linear") in prof.names and ("eager backward", "linear") in prof.names
    assert sum(s.seconds for s in kinds.values()) <= prof.wall * 1.05
    assert np.isfinite(loss) and "eager forward" in str(prof) and "wall" in prof.table(top=2)


def test_work_dispatched_before_the_block_is_not_charged_to_its_first_op():
    """A profile waits for what runs already before it starts timing: a long computation
    dispatched just before (a step's unfinished tail) does not show as the block's first op."""
    a = eg.tensor(np.full((1024, 1024), 1e-3, np.float32))
    for _ in range(3):  # compiles the ops, and measures how long the pending work takes
        start = time.perf_counter()
        y = a
        for _ in range(12):
            y = y @ a
        (y + 1.0).numpy()
        pending = time.perf_counter() - start
    y = a
    for _ in range(12):
        y = y @ a  # dispatched, still running when the profile opens
    with eg.profile() as prof:
        (y + 1.0).numpy()  # needs the pending result
    assert prof.seconds("eager forward") < pending / 2, (prof.seconds("eager forward"), pending)
    assert prof.wall < pending / 2


def test_a_compiled_backbone_is_one_forward_and_one_backward_and_compiles_once():
    eager_model, traced_model = _model(7), _model(7)
    traced_model = (partial_trace(traced_model[0]), *traced_model[1:])
    x, y = _data(1)
    profiles = []
    for _ in range(2):
        with eg.profile() as prof:
            got = _step(*traced_model, x, y)
        profiles.append(prof)
        assert got == pytest.approx(_step(*eager_model, x, y), rel=1e-6)
    first, second = profiles
    assert first.kinds["compile"].calls >= 1 and first.kinds["compile"].seconds > 0
    assert second.kinds["compile"].calls == 0
    for prof in profiles:
        assert prof.kinds["compiled forward"].calls == prof.kinds["compiled backward"].calls == 1
        assert ("compiled forward", "Sequential") in prof.names
        # the backbone's ops run inside its executable, not as eager ops
        assert prof.names[("eager forward", "linear")].calls == 1  # the head


def test_an_xla_trace_step_is_one_compiled_call():
    backbone, head, gm, opt = _model(4)
    step = xla_trace(lambda a, b: _step_tensors(backbone, head, gm, opt, a, b))
    x, y = (eg.tensor(v) for v in _data(2))
    step(x, y)
    with eg.profile() as prof:
        step(x, y).item()
    assert prof.kinds["compiled forward"].calls == 1 and prof.kinds["eager forward"].calls == 0


def _step_tensors(backbone, head, gm, opt, x, y):
    with gm:
        loss = F.cross_entropy(head(backbone(x)), y)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def test_without_sync_ops_show_their_dispatch_and_reads_the_wait():
    model = _model(5)
    x, y = _data(3)
    _step(*model, x, y)
    with eg.profile(sync=False) as prof:
        _step(*model, x, y)
    assert not prof.sync and prof.kinds["eager forward"].calls >= 6
    assert prof.kinds["host sync"].calls == 1


def test_profiles_are_per_thread_and_close_on_errors():
    seen = {}

    def other():
        a = eg.tensor([1.0, 2.0])
        seen["value"] = (a * 2).sum().item()

    with eg.profile() as prof:
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert seen["value"] == 6.0 and prof.kinds["eager forward"].calls == 0
    with pytest.raises(ZeroDivisionError), eg.profile():
        raise ZeroDivisionError
    assert profiling.ON == 0 and profiling.current() is None
    with eg.profile(), pytest.raises(RuntimeError, match="already open"), eg.profile():
        pass
