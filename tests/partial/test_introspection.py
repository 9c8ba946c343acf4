"""Introspection and rematerialization: `entries()` (HLO, cost and memory analyses, residual
bytes, guards), `explain()` naming why each capture after the first happened, captures logged to
the `partial` logger, and `partial_trace(remat=...)` keeping values and gradients while the
bytes kept from forward to backward go down."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
from eager.autodiff import GradManager
from partial import partial_trace
from tests.helpers import randn


def _deep_mlp(width=64, depth=6) -> M.Module:
    layers = []
    for _ in range(depth):
        layers += [M.Linear(width, width), M.GELU()]
    return M.Sequential(*layers)


def _train_step(f, net, x):
    gm = GradManager().attach(net.parameters())
    with gm:
        loss = (f(x) ** 2).mean()
        gm.backward(loss)
    return loss.numpy(), [p.grad.numpy() for p in net.parameters()]


def test_entries_report_executables_costs_memory_and_guards():
    net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.BatchNorm1d(16))
    f = partial_trace(net)
    x = randn(4, 8)
    f(x)
    (info,) = f.entries()
    # (on an accelerator the placement is part of the key and is shown: "... on cuda:0")
    assert info.arguments[0].split(" on ")[0] == "x: Tensor[4, 8] float32"
    assert len(info.arguments) == 1
    assert any("training=True" in g for g in info.guards)
    assert info.residual_bytes is None  # not trained yet
    with pytest.raises(LookupError, match="not run under a recording GradManager"):
        info.hlo_text("backward")
    assert "stablehlo" in info.hlo_text() or "func.func" in info.hlo_text()
    assert "HloModule" in info.hlo_text(optimized=True)
    assert info.cost_analysis()["flops"] > 2 * 4 * 8 * 16 * 0.9
    assert info.memory_analysis().argument_size_in_bytes > 0
    assert info.compile_seconds > 0
    _train_step(f, net, x)
    (info,) = f.entries()
    assert info.residual_bytes > 0
    assert info.memory_analysis("backward").output_size_in_bytes > 0
    assert "HloModule" in info.hlo_text("forward_vjp", optimized=True)


def _explained(f) -> list[str]:
    text = f.explain()
    return [line.strip() for line in text.splitlines() if line.strip().startswith("capture ")]


def test_explain_names_what_changed_for_every_capture_after_the_first():
    net = M.Sequential(M.Linear(3, 3), M.ReLU())

    def region(x, act):
        return getattr(F, act)(net(x))

    f = partial_trace(region)
    f(randn(2, 3), "relu")
    f(randn(5, 3), "relu")  # shape
    f(randn(5, 3).astype("float16"), "relu")  # dtype
    f(randn(5, 3), "tanh")  # a static argument
    net.eval()  # training mode
    f(randn(5, 3), "tanh")
    net.train()
    net.extra = M.Linear(3, 3)  # module structure
    f(randn(5, 3), "tanh")
    lines = _explained(f)
    assert len(lines) == 5, f.explain()
    assert "argument x changed from Tensor[2, 3] float32 to Tensor[5, 3] float32" in lines[0]
    assert "float16" in lines[1] and "argument x" in lines[1]
    assert "argument act changed from 'relu' to 'tanh'" in lines[2]
    assert "training" in lines[3]
    assert "extra" in lines[4]


def test_captures_are_logged_to_the_partial_logger(caplog):
    f = partial_trace(lambda x: x * 2)
    with caplog.at_level(logging.INFO, logger="partial"):
        f(randn(2))
        f(randn(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "partial"]
    assert any("capture 1: the first call" in m for m in messages)
    assert any("capture 2: argument" in m and "Tensor[3]" in m for m in messages)


@pytest.mark.parametrize("remat", [True, "dots"])
def test_remat_keeps_values_and_gradients_and_lowers_residual_bytes(remat):
    eg.random.seed(0)
    net = _deep_mlp()
    x = randn(32, 64)
    plain, rematted = partial_trace(net), partial_trace(net, remat=remat)
    loss0, grads0 = _train_step(plain, net, x)
    for p in net.parameters():
        p.grad = None
    loss1, grads1 = _train_step(rematted, net, x)
    np.testing.assert_allclose(loss1, loss0, rtol=1e-6)
    for g1, g0 in zip(grads1, grads0):
        np.testing.assert_allclose(g1, g0, rtol=1e-5, atol=1e-7)
    kept, kept_remat = plain.entries()[0].residual_bytes, rematted.entries()[0].residual_bytes
    assert kept_remat < kept, (kept_remat, kept)
    eager_loss = (net(x) ** 2).mean().numpy()
    np.testing.assert_allclose(loss1, eager_loss, rtol=1e-6)


def test_remat_with_graph_breaks_and_a_bad_value():
    net = _deep_mlp(depth=2)
    f = partial_trace(lambda x: F.relu(net(x)), remat=True, graph_breaks=True)
    loss, grads = _train_step(f, net, randn(4, 64))
    assert np.isfinite(loss) and all(np.isfinite(g).all() for g in grads)
    with pytest.raises(ValueError, match=r"remat=1\) *: remat is False, True or 'dots'|remat"):
        partial_trace(net, remat="all")
