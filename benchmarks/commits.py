"""What holding back signal handlers costs a commit (Note [deferred signals] in
`eager/core/context.py`).

Run `python -m benchmarks.commits`. It prints, as markdown:

- the cost of one outermost commit block, `with atomic(): pass`, against the same block with
  `contextlib.nullcontext()` (the reference, measured in the same rounds): the check that every
  signal handler is still wrapped, per commit, in microseconds;
- for small training steps (eager, and `xla_trace` of the whole step), how many commits a step
  makes and what share of the step's median time they cost.

Timings on a shared machine drift, so quantities are measured in interleaved rounds and each
figure is a median over rounds.
"""

from __future__ import annotations

import contextlib
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.core import context
from partial import xla_trace

ROUNDS = 15
BLOCKS = 20_000


def _per_block(make: Callable[[], contextlib.AbstractContextManager]) -> float:
    start = time.perf_counter()
    for _ in range(BLOCKS):
        with make():
            pass
    return (time.perf_counter() - start) / BLOCKS


def block_cost() -> tuple[float, float]:
    """Median seconds of one `atomic()` block and of one `nullcontext()` block."""
    atomic, null = [], []
    for _ in range(ROUNDS):
        atomic.append(_per_block(context.atomic))
        null.append(_per_block(contextlib.nullcontext))
    return statistics.median(atomic), statistics.median(null)


def _trainer(mode: str) -> Callable[[], object]:
    net = M.Sequential(M.Linear(8, 32), M.BatchNorm1d(32), M.ReLU(), M.Linear(32, 4))
    opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    gm = GradManager().attach(net.parameters())
    rng = np.random.default_rng(0)
    x = eg.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    y = eg.tensor(rng.integers(0, 4, 16).astype(np.int32))

    def step():
        opt.clear_grad()
        with gm:
            loss = F.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step()
        return loss

    fn = xla_trace(step) if mode == "xla_trace" else step
    return lambda: fn().numpy()


def commits_per_step(step: Callable[[], object]) -> int:
    """Outermost commit blocks one step enters (each checks the handlers once)."""
    count = [0]
    original = context._wrap_handlers

    def counting() -> None:
        count[0] += 1
        original()

    context._wrap_handlers = counting
    try:
        step()
    finally:
        context._wrap_handlers = original
    return count[0]


def step_time(step: Callable[[], object]) -> float:
    for _ in range(5):
        step()
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(20):
            step()
        times.append((time.perf_counter() - start) / 20)
    return statistics.median(times)


def main() -> None:
    print(f"machine: {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {len(context._CATCHABLE)} catchable signals")
    atomic, null = block_cost()
    per_commit = atomic - null
    print("\n| block | median us | vs nullcontext |\n| --- | ---: | ---: |")
    print(f"| `with nullcontext(): pass` | {null * 1e6:.2f} | 1.00x |")
    print(f"| `with atomic(): pass` | {atomic * 1e6:.2f} | {atomic / null:.2f}x |")
    print(f"\nper commit: {per_commit * 1e6:.2f} us")
    print("\n| step | commits | median step us | commits' share |\n| --- | ---: | ---: | ---: |")
    for mode in ("eager", "xla_trace"):
        step = _trainer(mode)
        t = step_time(step)
        n = commits_per_step(step)
        print(f"| {mode} | {n} | {t * 1e6:.0f} | {n * per_commit / t:.2%} |")


if __name__ == "__main__":
    main()
