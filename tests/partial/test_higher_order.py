"""Second-order gradients through compiled code: a gradient penalty (the norm of d(output) /
d(input), trained with respect to the parameters) with the network under `partial_trace` (jax
differentiates the segment's vjp) or the whole step under `xla_trace`, equal to eager."""

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace


def _train(mode: str, steps: int = 3):
    eg.random.seed(0)
    net = M.Sequential(M.Linear(4, 8), M.Tanh(), M.Linear(8, 2))
    body = partial_trace(net) if mode == "partial_trace" else net
    opt = optim.Adam(net.parameters(), lr=0.05)
    x0 = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)

    def step(x):
        outer, inner = GradManager().attach(net.parameters()), GradManager().attach([x])
        with outer:
            with inner:
                inner.backward(F.tanh(body(x)).sum())
            penalty = ((F.sqrt((x.grad * x.grad).sum(axis=1)) - 1) ** 2).mean()
            loss = penalty + body(x).mean()
            outer.backward(loss)
        opt.step().clear_grad()
        return loss

    if mode == "xla_trace":
        step = xla_trace(step)
    losses = [step(eg.tensor(x0)).item() for _ in range(steps)]
    return losses, net.state_dict(), opt.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["partial_trace", "xla_trace"])
def test_gradient_penalty_training_equals_eager(mode):
    losses, params, state = _train(mode)
    e_losses, e_params, e_state = _train("eager")
    np.testing.assert_allclose(losses, e_losses, rtol=1e-5, atol=1e-6)
    for k in e_params:
        np.testing.assert_allclose(params[k], e_params[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert len(state["state"]) == len(e_state["state"])
