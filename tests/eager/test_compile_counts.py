"""Compilations of eager training steps, counted through jax's own compile events: a second
identical step compiles nothing new (Note [committed arrays] in eager/device.py)."""

import jax
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from benchmarks.compiles import count_compiles
from eager.autodiff import GradManager
from partial import partial_trace
from tests.helpers import training_step

# odd sizes, so that the first step compiles anew whatever other tests ran in this process
BATCH, FEATURES, HIDDEN, CLASSES = 7, 13, 11, 5


def _stepper(compiled: bool):
    """An MLP training step: forward, backward, SGD with momentum; with `compiled`, the body
    runs under `partial_trace` and the head eagerly on its (committed) outputs, as in the
    demo."""
    body, head = M.Sequential(M.Linear(FEATURES, HIDDEN), M.ReLU()), M.Linear(HIDDEN, CLASSES)
    params = body.parameters() + head.parameters()
    gm = GradManager().attach(params)
    opt = optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-4)
    features = partial_trace(body) if compiled else body

    def step(x, y):
        def loss():
            return F.cross_entropy(head(features(eg.tensor(x))), eg.tensor(y))

        return training_step(gm, opt, loss).item()

    return step


def _batch(rng):
    return (rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
            rng.integers(0, CLASSES, BATCH).astype(np.int32))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "partial_trace_body"])
def test_second_step_compiles_nothing(rng, compiled):
    step = _stepper(compiled)
    with count_compiles() as first:
        step(*_batch(rng))
    with count_compiles() as second:
        step(*_batch(rng))  # new values, same shapes: every executable is reused
    assert first.count > 0
    assert second.count == 0, f"the second step compiled {second.names}"


def test_created_tensors_are_committed():
    if jax.device_count() > 1:
        pytest.skip("with several devices new tensors stay uncommitted (they follow the batch)")
    made = [eg.tensor([1.0, 2.0]), eg.zeros((2,)), eg.ones(3), eg.full((2,), 3.0),
            eg.arange(4), eg.eye(2), eg.linspace(0, 1, 3), eg.random.normal(size=(2,)),
            M.Linear(2, 2).weight, eg.tensor(jax.numpy.ones(2))]
    assert all(t._data.committed for t in made)
