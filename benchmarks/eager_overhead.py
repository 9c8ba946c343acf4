"""Per-op overhead of `eager` against raw jax calls on tiny (4x4 float32) arrays.

Run `python -m benchmarks.eager_overhead [--quick]`. It prints, as markdown tables:

- forward: the eager call (`a + b` on Tensors) against the same raw jax call on the jax arrays
  (`jnp.add(x, y)`); the goal is a ratio <= 1.5;
- backward of one recorded op: `gm.backward(y, dy)` alone, timed after the forward was recorded
  and drained, i.e. everything a backward costs for a one-node graph (the fixed GradManager work
  included);
- backward per node: the same for a chain of `CHAIN + 1` recorded ops minus the one-op graph,
  divided by `CHAIN`: the marginal cost of one more node in a backward pass;

both against one call of the jitted `jax.vjp` of the op (goal: ratio <= 2). Dispatch is timed
from an idle device queue, in batches that are drained afterwards. This machine's timings drift
(other tenants, frequency), so every quantity is measured in interleaved rounds and each ratio
is the median of per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager

CHAIN = 16


@dataclass
class OpCase:
    """One op: the eager call on Tensors, the raw jax call, and whether it can be chained."""

    name: str
    eager: Callable[[Any, Any], Any]
    raw: Callable[[Any, Any], Any]
    chainable: bool = True


CASES = [
    OpCase("a + b", lambda a, b: a + b, jnp.add),
    OpCase("a * b", lambda a, b: a * b, jnp.multiply),
    OpCase("a @ b", lambda a, b: a @ b, jnp.matmul),
    OpCase("relu(a)", lambda a, b: F.relu(a), lambda x, y: jnp.maximum(x, 0.0)),
    OpCase("a + 2.0", lambda a, b: a + 2.0, lambda x, y: jnp.add(x, 2.0)),
    OpCase("a[1:3]", lambda a, b: a[1:3], lambda x, y: x[1:3], chainable=False),
]


def time_call(fn: Callable[[], Any], number: int) -> float:
    """Mean time (seconds) of one call in a batch of `number` calls, starting from an idle
    device queue and draining it afterwards (dispatch cost, not compute)."""
    jax.block_until_ready(fn())
    start = time.perf_counter()
    for _ in range(number):
        out = fn()
    elapsed = time.perf_counter() - start
    jax.block_until_ready(out)
    return elapsed / number


def _unwrap(out: Any) -> Any:
    return eg.read(out) if isinstance(out, eg.Tensor) else out


class BackwardTimer:
    """Times `gm.backward` alone over a freshly recorded chain of `n` ops (the forward is
    recorded and drained untimed before each sample)."""

    def __init__(self, case: OpCase, a: eg.Tensor, b: eg.Tensor):
        self.case, self.a, self.b = case, a, b
        self.gm = GradManager().attach([a])
        self.dy = eg.ones(case.eager(a, b).shape)

    def __call__(self, n: int, samples: int) -> float:
        times = []
        for _ in range(samples):
            self.a.grad = None
            self.gm.record()
            out = self.a
            for _ in range(n):
                out = self.case.eager(out, self.b)
            jax.block_until_ready(_unwrap(out))
            start = time.perf_counter()
            self.gm.backward(out, self.dy)
            times.append(time.perf_counter() - start)
            jax.block_until_ready(_unwrap(self.a.grad))
        return statistics.median(times)


def measure(case: OpCase, number: int, rounds: int) -> dict[str, float]:
    """Medians over `rounds` interleaved rounds (microseconds, and per-round ratios): eager and
    raw forward, eager backward of a one-op graph and per node of a chain, raw jitted vjp."""
    host = np.arange(16, dtype=np.float32).reshape(4, 4) / 16 - 0.4
    x, y = jnp.asarray(host), jnp.asarray(host.T.copy())
    a, b = eg.Parameter(host), eg.tensor(host.T.copy())
    backward = BackwardTimer(case, a, b)
    vjp = jax.jit(lambda x, y, ct: jax.vjp(lambda x: case.raw(x, y), x)[1](ct)[0])
    ct = jnp.ones(case.raw(x, y).shape, x.dtype)
    samples = max(number // 20, 20)
    rows = []
    for _ in range(rounds):
        r = {
            "eager_fwd": time_call(lambda: _unwrap(case.eager(a, b)), number),
            "raw_fwd": time_call(lambda: case.raw(x, y), number),
            "bwd_one": backward(1, samples),
            "raw_vjp": time_call(lambda: vjp(x, y, ct), number),
        }
        if case.chainable:
            r["bwd_node"] = (backward(CHAIN + 1, samples // 4) - r["bwd_one"]) / CHAIN
        rows.append(r)
    res = {k: statistics.median(row[k] for row in rows) * 1e6 for k in rows[0]}
    for name, num, den in [("fwd_ratio", "eager_fwd", "raw_fwd"),
                           ("bwd_one_ratio", "bwd_one", "raw_vjp"),
                           ("bwd_node_ratio", "bwd_node", "raw_vjp")]:
        if num in rows[0]:
            res[name] = statistics.median(row[num] / row[den] for row in rows)
    return res


def _dispatch_baselines(number: int, rounds: int) -> dict[str, float]:
    """`a + b` against jnp.add, the operator on jax arrays and jax.jit(jnp.add): microseconds,
    medians over interleaved rounds."""
    x, y = jnp.ones((4, 4)), jnp.ones((4, 4))
    a, b = eg.tensor(np.ones((4, 4), np.float32)), eg.tensor(np.ones((4, 4), np.float32))
    jitted = jax.jit(jnp.add)
    calls = {
        "eager `a + b` (Tensors)": lambda: eg.read(a + b),
        "`jnp.add(x, y)`": lambda: jnp.add(x, y),
        "`x + y` (jax arrays)": lambda: x + y,
        "`jax.jit(jnp.add)(x, y)`": lambda: jitted(x, y),
    }
    rows = [{name: time_call(fn, number) for name, fn in calls.items()} for _ in range(rounds)]
    return {name: statistics.median(r[name] for r in rows) * 1e6 for name in calls}


def _fmt(value: float | None, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.2f}{suffix}"


def main(argv: list[str] | None = None) -> None:
    """Measure and print the dispatch table and the per-op forward/backward table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    number, rounds = (500, 5) if args.quick else (2000, 15)

    base = _dispatch_baselines(number, rounds)
    eager_add = base["eager `a + b` (Tensors)"]
    print(f"## Dispatch of a 4x4 float32 add (median of {rounds} rounds of {number} calls)\n")
    print("| call | µs/call | eager / this |\n| --- | ---: | ---: |")
    for name, us in base.items():
        print(f"| {name} | {us:.2f} | {eager_add / us:.2f}x |")

    print(f"\n## Per-op forward and backward (4x4 float32; medians of {rounds} interleaved "
          f"rounds; ratios are medians of per-round ratios)\n")
    print("| op | eager fwd µs | jax fwd µs | fwd ratio | eager bwd, 1-op graph µs | "
          "eager bwd per node µs | jitted vjp µs | bwd ratio (1 op) | bwd ratio (per node) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in CASES:
        r = measure(case, number, rounds)
        print(f"| `{case.name}` | {r['eager_fwd']:.2f} | {r['raw_fwd']:.2f} | "
              f"{r['fwd_ratio']:.2f}x | {r['bwd_one']:.2f} | {_fmt(r.get('bwd_node'))} | "
              f"{r['raw_vjp']:.2f} | {r['bwd_one_ratio']:.2f}x | "
              f"{_fmt(r.get('bwd_node_ratio'), 'x')} |")


if __name__ == "__main__":
    main()
