"""The models and training steps the distributed tests compare: an MLP, a CNN with BatchNorm
and a small GPT (the benchmark workload's blocks), trained by SGD with momentum or Adam, eagerly
or under `partial_trace` (the whole model, or the backbone with the head eager) / `xla_trace`.
Importable by spawned workers (no test runner state)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from benchmarks.workloads import Block
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace

BATCH = 8
STEPS = 3
GPT = dict(vocab=16, d=32, heads=2, seq=8, hidden=64)


class TinyGPT(M.Module):
    """Token and position embeddings, one pre-LN block of the GPT workload, a final LayerNorm:
    the features of every position, flattened to `[B*T, d]` for the head."""

    def __init__(self) -> None:
        super().__init__()
        d = GPT["d"]
        self.tok_emb = M.Embedding(GPT["vocab"], d)
        self.pos_emb = eg.Parameter(eg.random.normal(0, 0.02, (GPT["seq"], d)))
        self.block = Block(d, GPT["heads"], GPT["hidden"])
        # No bias on q, k, v: the key's bias does not change the attention (it adds the same
        # number to every score of a query), so its gradient is round-off, which Adam turns
        # into steps of +-lr that differ between any two orders of summation.
        self.block.attn.qkv = M.Linear(d, 3 * d, bias=False)
        self.ln_f = M.LayerNorm(d)

    def forward(self, x: Any) -> Any:
        h = self.ln_f(self.block(self.tok_emb(x) + self.pos_emb))
        return h.reshape(-1, GPT["d"])


def build(kind: str, sync_bn: bool = False) -> M.Module:
    """The same initial model on every call (fixed seeds)."""
    np.random.seed(3)
    eg.random.seed(3)
    bn = M.SyncBatchNorm if sync_bn else M.BatchNorm2d
    if kind == "mlp":
        return M.Sequential(M.Linear(12, 16), M.ReLU(), M.Linear(16, 4))
    if kind == "gpt":
        return M.Sequential(TinyGPT(), M.Linear(GPT["d"], GPT["vocab"]))
    # No bias before a BatchNorm: its gradient is round-off, which Adam turns into +-lr.
    return M.Sequential(M.Conv2d(1, 4, 3, padding=1, bias=False), bn(4), M.ReLU(),
                        M.Flatten(), M.Linear(4 * 6 * 6, 4))


def batches(kind: str) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    if kind == "gpt":  # next-token prediction: labels are the tokens shifted by one
        tokens = [rng.integers(0, GPT["vocab"], (BATCH, GPT["seq"] + 1)).astype(np.int32)
                  for _ in range(STEPS)]
        return [(t[:, :-1], t[:, 1:]) for t in tokens]
    shape = (BATCH, 12) if kind == "mlp" else (BATCH, 1, 6, 6)
    return [(rng.standard_normal(shape).astype(np.float32),
             rng.integers(0, 4, BATCH).astype(np.int32)) for _ in range(STEPS)]


def make_step(net: M.Module, optimizer: str, mode: str,
              callbacks: list | None = None) -> tuple[Callable, optim.Optimizer]:
    params = list(net.parameters())
    # Adam's eps 1e-4, not 1e-8: a step moves a weight by about lr * g / (|g| + eps), so where
    # a gradient entry is a sum that nearly cancels, a round-off difference between two orders
    # of summation (one device, four) becomes a visible step. The GPT's smallest entry is
    # 3e-8 (2e-6 apart with eps 1e-8); the CNN's linear weight [1, 122] starts at |g| 3.3e-6
    # (from MegEngine's N(0, 1 / fan_in) initialization), 1.4e-5 apart after the steps with
    # eps 1e-5. With 1e-4 the step's sensitivity to round-off is lr / eps: 1e-2 / 1e-4.
    opt = (optim.SGD(params, lr=0.1, momentum=0.9) if optimizer == "sgd"
           else optim.Adam(params, lr=1e-2, eps=1e-4))
    gm = GradManager().attach(params, callbacks=callbacks)
    if mode == "partial_trace+head":  # the backbone compiled, the head eager
        backbone, head = partial_trace(net[:-1]), net[-1]

        def body(x: Any) -> Any:
            return head(backbone(x))
    elif mode.startswith("partial_trace"):  # "+gmcallback": the all-reduce compiled too
        body = partial_trace(net, trace_gmcallback=mode.endswith("+gmcallback"))
    else:
        body = net

    def step(x: Any, y: Any) -> Any:
        opt.clear_grad()
        with gm:
            loss = F.cross_entropy(body(x), y.reshape(-1))  # gpt: one label per token
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
    # a state dict holds BatchNorm's (1, C, 1, 1) tensors as (C,): compare values, not layouts
    assert all(np.size(got[k]) == np.size(want[k]) for k in want), \
        {k: (np.shape(got[k]), np.shape(want[k])) for k in want}
    return max(float(np.max(np.abs(np.reshape(got[k], np.shape(want[k])) - want[k])))
               for k in want)
