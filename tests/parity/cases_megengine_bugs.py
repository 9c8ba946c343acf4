"""MegEngine 1.13's own CPU defects, kept as evidence rather than copied (`megengine_bug`): each
case returns what the framework computed (`got`) and an independent reference (`want`) made in
the case from the framework's own forward values or from numpy, and the test checks that this
project matches the reference and MegEngine does not."""

from __future__ import annotations

from typing import Any

import numpy as np
from parity_cases import case, data, finite_difference


def _recurrent_grads(kind: str) -> dict:
    """Input gradients of a one-layer `kind` by autodiff and by finite differences of the
    forward (an RNN's agreed in MegEngine 1.13 when checked so; an LSTM's did not)."""
    import megengine as mge
    import megengine.module as M
    from megengine.autodiff import GradManager

    net = getattr(M, kind)(3, 4)
    w = mge.tensor(data(5, 2, 4, seed=3))

    def loss(x: np.ndarray) -> float:
        out = net(mge.tensor(x))[0]
        return float((out * w).sum().numpy())

    x = data(5, 2, 3, seed=2)
    xt = mge.tensor(x)
    gm = GradManager().attach([xt])
    with gm:
        gm.backward((net(xt)[0] * w).sum())
    points = [0, 7, 13, 29]
    return {"got": xt.grad.numpy().ravel()[points], "want": finite_difference(loss, x, points)}


@case(rtol=2e-2, atol=2e-3, megengine_bug="the fused LSTM's backward gives wrong input "
      "gradients on the CPU")
def lstm_input_gradient() -> dict:
    return _recurrent_grads("LSTM")


@case(rtol=1e-4, atol=1e-6, megengine_bug="LAMB fails at its first step on 1.13's CPU wheel "
      "(TypeError: Optimizer._add_state() got an unexpected keyword argument 'dtype')")
def lamb_step() -> dict:
    import megengine as mge
    import megengine.optimizer as optim

    p0 = np.array([0.3, -0.2, 0.25, 0.1], "float32")
    g = np.array([0.05, 0.02, -0.04, 0.01], "float32")
    p = mge.Parameter(p0)
    opt = optim.LAMB([p], lr=0.1, weight_decay=0.1)
    p.grad = mge.tensor(g)
    opt.step()
    # the same rule in float64 numpy: Adam's first step direction plus decoupled decay,
    # scaled by |p| / |r|
    m, v = 0.1 * g, 0.001 * g.astype("float64") ** 2
    r = (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8) + 0.1 * p0
    want = p0 - 0.1 * (np.linalg.norm(p0) / np.linalg.norm(r)) * r
    return {"got": p.numpy(), "want": want.astype("float32")}


@case(rtol=1e-3, atol=1e-3, megengine_bug="max_pool2d of a float16 input returns wrong "
      "values on the CPU")
def max_pool_float16() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = data(1, 2, 6, 6, seed=5).astype("float16")
    got = F.max_pool2d(mge.tensor(x), 2).numpy().astype("float32")
    want = x.astype("float32").reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5))
    return {"got": got, "want": want}


@case(rtol=1e-5, atol=1e-6, megengine_bug="a partial_trace'd forward with BatchNorm in "
      "training mode fails at its second call (AssertionError in the traced call; without "
      "capture_as_const it refuses the module's tensors)")
def partial_trace_batchnorm_statistics() -> dict:
    import megengine as mge
    import megengine.module as M
    from megengine.jit import partial_trace

    class Net(M.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = M.BatchNorm2d(3)

        @partial_trace(capture_as_const=True)
        def forward(self, x: Any) -> Any:
            return self.bn(x)

    net = Net()
    batches = [data(4, 3, 2, 2, seed=s) for s in range(3)]
    for b in batches:
        net(mge.tensor(b))
    mean, var = np.zeros(3), np.ones(3)
    for b in batches:  # MegEngine's momentum 0.9 and the unbiased batch variance
        mean = 0.9 * mean + 0.1 * b.mean(axis=(0, 2, 3))
        var = 0.9 * var + 0.1 * b.var(axis=(0, 2, 3), ddof=1)
    return {"got": [net.bn.running_mean.numpy().ravel(), net.bn.running_var.numpy().ravel()],
            "want": [mean.astype("float32"), var.astype("float32")]}


@case(rtol=0, atol=0, megengine_bug="its CPU float16 rounds ties away from zero, where IEEE 754 "
      "(numpy, PyTorch) rounds them to even: 1 + 2**-11 is 1.0009765625 there, 1.0 here; the "
      "one-ulp difference of an amp convolution with bias")
def float16_ties_round_to_even() -> dict:
    import megengine as mge

    a = np.array([1.0, 1.0, 3.0, -1.0], "float16")
    b = np.array([2.0 ** -11, 3 * 2.0 ** -11, 2.0 ** -10, -2.0 ** -11], "float16")
    x = np.array([1.00048828125, 1.00146484375, -1.00048828125], "float32")  # exact ties
    got = np.concatenate([(mge.tensor(a) + mge.tensor(b)).numpy(),
                          mge.tensor(x).astype("float16").numpy()])
    want = np.concatenate([a + b, x.astype("float16")])  # numpy: IEEE's round to even
    return {"got": got.astype("float64"), "want": want.astype("float64")}
