"""The dispatcher never traces anew on the hot path: once a training step has run, later steps
(with new data, a new learning rate, new dropout masks) add no jit cache entries."""

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from tests.helpers import training_step


def _traces() -> int:
    """Total compiled variants over every op's cached forward and backward."""
    return sum(fn._cache_size() for op in eg.OPS.values()
               for fn in (*op._fwd.values(), *op._bwd.values()))


@pytest.mark.slow
def test_training_steps_after_the_first_do_not_trace(rng):
    net = M.Sequential(M.Conv2d(2, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(), M.Flatten(),
                       M.Dropout(0.2), M.Linear(4 * 6 * 6, 3))
    gm = GradManager().attach(net.parameters())
    opt = optim.Adam(net.parameters(), lr=1e-2)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    def step():
        x = eg.tensor(rng.standard_normal((5, 2, 6, 6)).astype(np.float32))
        y = eg.tensor(rng.integers(0, 3, 5))
        loss = training_step(gm, opt, lambda: F.cross_entropy(net(x), y))
        sched.step()
        return loss.item()

    step()
    before = _traces()
    losses = [step() for _ in range(3)]
    assert _traces() == before
    assert len(set(losses)) == 3 and opt.param_groups[0]["lr"] == 1e-2 / 16


def test_python_scalars_and_int_indices_are_inputs_not_constants():
    x = eg.tensor(np.arange(6.0, dtype=np.float32))
    (x * 0.5, x[1])
    before = _traces()
    for i in range(2, 6):
        assert (x * float(i)).numpy()[1] == float(i)
        assert x[i].item() == float(i)
    assert _traces() == before
