"""`partial_trace(trace_gmcallback=True)`: GradManager callbacks of segment inputs run compiled,
with the values eager training gives (after several steps: parameters, optimizer state and
`.grad`), their Python only when captured, closed-over tensors read at every call, and the
Python callbacks kept for gradients the segment does not produce alone."""

from __future__ import annotations

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import TraceError, partial_trace

STEPS = 4


class Counted:
    """Callbacks that count their Python calls: a scale by a closed-over tensor that changes
    every step, a weight decay that reads the parameter, and a clip by norm (nonlinear: it
    must see a gradient whole)."""

    def __init__(self) -> None:
        self.calls = 0
        self.scale = eg.tensor(1.0)

    def scaled(self, p, g):
        self.calls += 1
        return g * self.scale

    def decay(self, p, g):
        self.calls += 1
        return g + 1e-2 * p

    def clipped(self, p, g):
        self.calls += 1
        norm = F.sqrt((g * g).sum())
        return g * F.minimum(0.5 / (norm + 1e-6), 1.0)

    def all(self) -> list:
        return [self.scaled, self.decay, self.clipped]


def _train(mode: str, shared_head: bool = False) -> tuple[dict, int]:
    """Trains an MLP backbone (compiled or not) with an eager head; returns the final state
    (parameters, momentum, last gradients) and how often the callbacks' Python ran."""
    eg.random.seed(3)
    rng = np.random.default_rng(3)
    # every weight (4, 4) and bias (4,): each callback's ops compile for two shapes, not five
    net = M.Sequential(M.Linear(4, 4), M.ReLU(), M.Linear(4, 4))
    head = eg.Parameter(rng.standard_normal((4, 4)).astype(np.float32))
    cbs = Counted()
    params = list(net.parameters()) + [head]
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    gm = GradManager().attach(params, callbacks=cbs.all())
    body = partial_trace(net, trace_gmcallback=(mode == "compiled")) if mode != "eager" else net
    for i in range(STEPS):
        cbs.scale[...] = 1.0 / (i + 1)
        x = eg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
        y = eg.tensor(rng.integers(0, 3, 5).astype(np.int32))
        opt.clear_grad()
        with gm:
            logits = body(x) @ head
            if shared_head:  # the first layer's weight gets a gradient from eager code too
                logits = logits + (net[0].weight.sum() * 1e-2)
            gm.backward(F.cross_entropy(logits, y))
        opt.step()
    out = {f"p{i}": p.numpy() for i, p in enumerate(params)}
    out.update({f"g{i}": p.grad.numpy() for i, p in enumerate(params)})
    out.update({f"m{i}": np.asarray(v) for i, p in enumerate(params)
                for v in opt.state[p].values()})
    return out, cbs.calls


def _close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.slow
def test_compiled_callbacks_train_as_eager_and_run_their_python_once():
    want, eager_calls = _train("eager")
    got, calls = _train("compiled")
    _close(got, want)
    n_backbone, n_callbacks = 4, 3
    assert eager_calls == STEPS * (n_backbone + 1) * n_callbacks
    # the backbone's callbacks ran in Python only when their step was captured; the head's
    # (an eager parameter) on every step
    assert calls == n_backbone * n_callbacks + STEPS * n_callbacks


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree
@pytest.mark.slow
def test_without_the_option_callbacks_run_in_python_on_every_step():
    want, eager_calls = _train("eager")
    got, calls = _train("python")
    _close(got, want)
    assert calls == eager_calls


def test_a_weight_with_a_gradient_from_eager_code_too_keeps_its_python_callbacks():
    want, _ = _train("eager", shared_head=True)
    got, calls = _train("compiled", shared_head=True)
    _close(got, want)  # the clip saw the whole gradient of the shared weight
    n_compiled, n_python = 3, 2  # the shared weight joins the head in Python
    assert calls == n_compiled * 3 + STEPS * n_python * 3


def test_a_callback_attached_later_is_compiled_in():
    w = eg.Parameter(np.ones(3, np.float32))
    f = partial_trace(lambda x: (x * w).sum(), trace_gmcallback=True)
    gm = GradManager().attach([w])
    grads = []
    for i in range(3):
        if i == 1:
            gm.attach([w], callbacks=lambda p, g: g * 10)
        w.grad = None
        with gm:
            gm.backward(f(eg.tensor([1.0, 2.0, 3.0])))
        grads.append(w.grad.numpy().tolist())
    assert grads == [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [10.0, 20.0, 30.0]]


def test_a_callback_returning_no_tensor_is_a_clear_error():
    w = eg.Parameter(np.ones(3, np.float32))
    f = partial_trace(lambda x: (x * w).sum(), trace_gmcallback=True)
    gm = GradManager().attach([w], callbacks=lambda p, g: None)
    with pytest.raises(TraceError, match="returned NoneType"), gm:
        gm.backward(f(eg.tensor([1.0, 2.0, 3.0])))
    assert w.grad is None  # nothing was accumulated


def test_a_segment_called_twice_before_backward_keeps_its_python_callbacks():
    """Two calls send the weight two gradients: the (nonlinear) callback sees their sum."""
    w = eg.Parameter(np.ones(3, np.float32))
    cb = Counted()
    f = partial_trace(lambda x: (x * w).sum(), trace_gmcallback=True)
    gm = GradManager().attach([w], callbacks=cb.clipped)
    with gm:
        gm.backward(f(eg.tensor([1.0, 2.0, 3.0])) + f(eg.tensor([3.0, 2.0, 1.0])))
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 4.0) * 0.5 / np.sqrt(48), rtol=1e-5)
    assert cb.calls == 1
