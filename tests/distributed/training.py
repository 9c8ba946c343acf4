"""The models and training steps the distributed tests compare: an MLP and a CNN with
BatchNorm, trained by SGD with momentum or Adam, eagerly or under `partial_trace` /
`xla_trace`. Importable by spawned workers (no test runner state)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace

BATCH = 8
STEPS = 3


def build(kind: str, sync_bn: bool = False) -> M.Module:
    """The same initial model on every call (fixed seeds)."""
    np.random.seed(3)
    eg.random.seed(3)
    bn = M.SyncBatchNorm if sync_bn else M.BatchNorm2d
    if kind == "mlp":
        return M.Sequential(M.Linear(12, 16), M.ReLU(), M.Linear(16, 4))
    # No bias before a BatchNorm: its gradient is round-off, which Adam turns into +-lr.
    return M.Sequential(M.Conv2d(1, 4, 3, padding=1, bias=False), bn(4), M.ReLU(),
                        M.Flatten(), M.Linear(4 * 6 * 6, 4))


def batches(kind: str) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    shape = (BATCH, 12) if kind == "mlp" else (BATCH, 1, 6, 6)
    return [(rng.standard_normal(shape).astype(np.float32),
             rng.integers(0, 4, BATCH).astype(np.int32)) for _ in range(STEPS)]


def make_step(net: M.Module, optimizer: str, mode: str,
              callbacks: list | None = None) -> tuple[Callable, optim.Optimizer]:
    params = list(net.parameters())
    opt = (optim.SGD(params, lr=0.1, momentum=0.9) if optimizer == "sgd"
           else optim.Adam(params, lr=1e-2))
    gm = GradManager().attach(params, callbacks=callbacks)
    if mode.startswith("partial_trace"):  # "+gmcallback": the all-reduce compiled too
        body = partial_trace(net, trace_gmcallback=mode.endswith("+gmcallback"))
    else:
        body = net

    def step(x: Any, y: Any) -> Any:
        opt.clear_grad()
        with gm:
            loss = F.cross_entropy(body(x), y)
            gm.backward(loss)
        opt.step()
        return loss

    return (xla_trace(step) if mode == "xla_trace" else step), opt


def state(net: M.Module) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in net.state_dict().items()}


def reference(kind: str, optimizer: str) -> dict[str, np.ndarray]:
    """Eager training on one device over the whole batch."""
    net = build(kind)
    step, _ = make_step(net, optimizer, "eager")
    for x, y in batches(kind):
        step(eg.tensor(x), eg.tensor(y))
    return state(net)


def max_error(got: dict, want: dict) -> float:
    assert got.keys() == want.keys(), (sorted(got), sorted(want))
    return max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
