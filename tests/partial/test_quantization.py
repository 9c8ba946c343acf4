"""Quantization-aware training compiled: a small conv/linear net whose weights and activations
pass through observers and fake quantizers (FakeQuantize with min-max and EMA observers, TQT,
LSQ) trains the same eagerly, with a `partial_trace` forward and as one `xla_trace` step:
outputs, gradients, parameters (the learned scales too) and the observers' statistics agree
after several steps, each compiled function captured once. The observers' buffers are state a
compiled step writes back.
"""

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
import eager.quantization as Q
from eager.autodiff import GradManager
from partial import xla_trace
from tests.helpers import labelled_batch

from .differential import World, check_against_eager


class QuantNet(M.Module):
    """conv -> relu -> linear, with the weight and the activation of each fake-quantized the way
    a QAT module does: observe, then fake-quantize with the observer's qparams (or a learned
    quantizer, `kind` "tqt" / "lsq")."""

    def __init__(self, kind="ema"):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.fc = M.Linear(4 * 6 * 6, 5)
        self.kind = kind
        qc = {"ema": Q.ema_fakequant_qconfig, "minmax": Q.min_max_fakequant_qconfig,
              "tqt": Q.tqt_qconfig, "lsq": Q.ema_fakequant_qconfig}[kind]
        self.quant = {name: self._pair(qc, weight) for name, weight in
                      [("conv_w", True), ("conv_a", False), ("fc_w", True), ("fc_a", False)]}
        if kind == "lsq":  # learned step sizes, started from a fixed scale
            for name, (_, fq) in self.quant.items():
                lsq = Q.LSQ(fq.dtype)
                lsq.set_qparams(Q.create_qparams(scale=eg.tensor(0.05)))
                self.quant[name] = (None, lsq)
        if kind == "tqt":
            for _, fq in self.quant.values():
                fq.set_qparams(Q.create_qparams(scale=eg.tensor(2.0 ** -4)))

    @staticmethod
    def _pair(qc, weight):
        obs = qc.weight_observer if weight else qc.act_observer
        fq = qc.weight_fake_quant if weight else qc.act_fake_quant
        return (obs() if obs else None, fq())

    def _q(self, name, x):
        obs, fq = self.quant[name]
        if obs is None:
            return fq(x)
        x = obs(x)
        return fq(x, obs.get_qparams())

    def forward(self, x):
        w = self._q("conv_w", self.conv.weight)
        h = F.relu(F.conv2d(x, w, self.conv.bias, padding=1))
        h = self._q("conv_a", h).reshape(x.shape[0], -1)
        y = F.linear(h, self._q("fc_w", self.fc.weight), self.fc.bias)
        return self._q("fc_a", y)


KINDS = ["ema", "minmax", "tqt", "lsq"]
# LSQ's step size gradient sums (round(v) - v) * g over a whole activation, terms of both signs
# that cancel: XLA sums them in another order when fused, a few 1e-5 apart after 3 steps
ATOL = {"lsq": 1e-4}


def _build(kind, whole):
    """`whole`: the step (forward, backward, update) in one compiled function; else the forward
    compiled and the rest eager."""
    def build(wrap):
        net = QuantNet(kind)
        opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

        def train(x, y):
            gm = GradManager().attach(net.parameters())
            with gm:
                loss = F.loss.cross_entropy(forward(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        forward = net if whole else wrap(lambda x: net(x))
        compiled = wrap(train) if whole else train
        traced = [compiled if whole else forward]

        def step(i):
            x, y = labelled_batch(i, (4, 3, 6, 6), 5)
            return compiled(x, y)

        return World(step, modules=[net], optimizers=[opt], traced=traced)

    return build


@pytest.mark.parametrize("kind", KINDS)
def test_qat_forward_under_partial_trace_matches_eager(kind):
    world = check_against_eager(_build(kind, whole=False), steps=3, rtol=1e-5,
                                atol=ATOL.get(kind, 1e-5))
    assert world.traced[0].cache_info().captures == 1


@pytest.mark.parametrize("kind", KINDS)
def test_qat_step_under_xla_trace_matches_eager(kind):
    world = check_against_eager(_build(kind, whole=True), steps=3, rtol=1e-5,
                                atol=ATOL.get(kind, 1e-5), compile=xla_trace)
    assert world.traced[0].cache_info().captures == 1


def test_observer_statistics_are_written_back_by_a_compiled_step():
    obs = Q.ExponentialMovingAverageObserver(momentum=0.5)
    observe = xla_trace(lambda x: obs(x) * 1)
    for v in ([1.0, -2.0], [3.0, 0.0], [0.5, -0.5]):
        observe(eg.tensor(v))
    # -2, then -1, then -0.75; 1, then 2, then 1.25
    np.testing.assert_allclose([obs.min_val.numpy(), obs.max_val.numpy()], [-0.75, 1.25])
    assert observe.cache_info().captures == 1


@pytest.mark.parametrize("with_break", [False, True], ids=["whole", "with a value read"])
def test_tensor_qparams_set_and_read_inside_a_region(with_break):
    """fake_quant_bias reads the input's and the weight's `qparams`, set inside the region by
    the activation's and the weight's fake quantization: the capture, and the lazy engine past
    a value read, run that Python as eager code does."""
    def build(wrap):
        fc = M.Linear(6, 3)
        act, weight = Q.MinMaxObserver(dtype="qint8"), Q.MinMaxObserver(dtype="qint8_narrow")
        fq_a, fq_w = Q.FakeQuantize("qint8"), Q.FakeQuantize("qint8_narrow")

        def quant(obs, fq, x):
            qparams = obs.get_qparams() if obs(x) is x else None
            out = fq(x, qparams)
            out.qparams.update(qparams)
            return out

        def forward(x):
            h = quant(act, fq_a, x)
            if with_break and h.abs().max().item() > 100:  # a graph break, never taken
                h = h * 0
            w = quant(weight, fq_w, fc.weight)
            return F.linear(h, w, Q.fake_quant_bias(fc.bias, h, w))

        region = wrap(forward)
        opt = optim.SGD(fc.parameters(), lr=0.1)
        gm = GradManager().attach(fc.parameters())

        def step(i):
            with gm:
                y = region(eg.tensor(np.random.default_rng(i).normal(size=(4, 6)), "float32"))
                gm.backward((y * y).sum())
            opt.step().clear_grad()
            return y

        return World(step, modules=[fc, act, weight], optimizers=[opt])

    check_against_eager(build, steps=3, graph_breaks=with_break)
