"""Per-op overhead of `eager` against raw jax calls on tiny (4x4 float32) arrays.

Run `python -m benchmarks.eager_overhead [--quick]`. For each op it prints, as a markdown table:

- forward: the eager call (`a + b` on Tensors) against the same raw jax call on the jax arrays
  (`jnp.add(x, y)`); the goal is a ratio <= 1.5;
- backward of one recorded op: `with gm: y = op(a); gm.backward(y, dy)` minus the same block
  without the backward, i.e. everything `gm.backward` costs for a one-node graph (the fixed
  GradManager work included);
- backward per node: the same difference for a chain of `CHAIN` recorded ops, divided by `CHAIN`,
  i.e. the marginal cost of one more node in a backward pass;

both against one call of the jitted `jax.vjp` of the op (goal: ratio <= 2). Times are medians over
several batches of many calls (timeit style); no call blocks, as a dispatch benchmark should not,
but each batch is drained before the next.
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


def time_call(fn: Callable[[], Any], number: int, repeat: int) -> float:
    """Median over `repeat` batches of the mean time (seconds) of one call in a batch of
    `number` calls; results are drained between batches."""
    out = fn()
    samples = []
    for _ in range(repeat):
        jax.block_until_ready(out)
        start = time.perf_counter()
        for _ in range(number):
            out = fn()
        samples.append((time.perf_counter() - start) / number)
    jax.block_until_ready(out)
    return statistics.median(samples)


def _unwrap(out: Any) -> Any:
    return eg.read(out) if isinstance(out, eg.Tensor) else out


def measure(case: OpCase, number: int, repeat: int) -> dict[str, float]:
    """Times (microseconds) of one op: eager and raw forward, eager backward (one op and per
    node of a chain), and the raw jitted vjp."""
    host = np.arange(16, dtype=np.float32).reshape(4, 4) / 16 - 0.4
    x, y = jnp.asarray(host), jnp.asarray(host.T.copy())
    a, b = eg.Parameter(host), eg.tensor(host.T.copy())
    gm = GradManager().attach([a])
    dy = eg.ones(case.eager(a, b).shape)

    def recorded(n: int, backward: bool) -> Callable[[], Any]:
        def run() -> Any:
            a.grad = None
            with gm:
                out = a
                for _ in range(n):
                    out = case.eager(out, b)
                if backward:
                    gm.backward(out, dy)
            return _unwrap(out)

        return run

    def t(fn: Callable[[], Any], scale: int = 1) -> float:
        return time_call(fn, max(number // scale, 10), repeat) * 1e6

    vjp = jax.jit(lambda x, y, ct: jax.vjp(lambda x: case.raw(x, y), x)[1](ct)[0])
    ct = jnp.ones(case.raw(x, y).shape, x.dtype)
    res = {
        "eager_fwd": t(lambda: _unwrap(case.eager(a, b))),
        "raw_fwd": t(lambda: case.raw(x, y)),
        "bwd_one": t(recorded(1, True), 3) - t(recorded(1, False), 3),
        "raw_vjp": t(lambda: vjp(x, y, ct)),
    }
    if case.chainable:
        chain = t(recorded(CHAIN, True), 3 * CHAIN) - t(recorded(CHAIN, False), 3 * CHAIN)
        res["bwd_node"] = chain / CHAIN
    return res


def _dispatch_baselines(number: int, repeat: int) -> dict[str, float]:
    """`a + b` against jnp.add, the operator on jax arrays and jax.jit(jnp.add) (microseconds)."""
    x, y = jnp.ones((4, 4)), jnp.ones((4, 4))
    a, b = eg.tensor(np.ones((4, 4), np.float32)), eg.tensor(np.ones((4, 4), np.float32))
    jitted = jax.jit(jnp.add)
    return {name: time_call(fn, number, repeat) * 1e6 for name, fn in [
        ("eager `a + b` (Tensors)", lambda: eg.read(a + b)),
        ("`jnp.add(x, y)`", lambda: jnp.add(x, y)),
        ("`x + y` (jax arrays)", lambda: x + y),
        ("`jax.jit(jnp.add)(x, y)`", lambda: jitted(x, y)),
    ]}


def main(argv: list[str] | None = None) -> None:
    """Measure and print the dispatch table and the per-op forward/backward table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    number, repeat = (500, 5) if args.quick else (3000, 9)

    base = _dispatch_baselines(number, repeat)
    eager_add = base["eager `a + b` (Tensors)"]
    print(f"## Dispatch of a 4x4 float32 add (median of {repeat} batches of {number} calls)\n")
    print("| call | µs/call | eager / this |\n| --- | ---: | ---: |")
    for name, us in base.items():
        print(f"| {name} | {us:.2f} | {eager_add / us:.2f}x |")

    print(f"\n## Per-op forward and backward (4x4 float32; backward per node from a chain of "
          f"{CHAIN})\n")
    print("| op | eager fwd µs | jax fwd µs | fwd ratio | eager bwd, 1-op graph µs | "
          "eager bwd per node µs | jitted vjp µs | bwd ratio (1 op) | bwd ratio (per node) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in CASES:
        r = measure(case, number, repeat)
        node = r.get("bwd_node")
        node_s = f"{node:.2f}" if node is not None else "n/a"
        node_ratio = f"{node / r['raw_vjp']:.2f}x" if node is not None else "n/a"
        print(f"| `{case.name}` | {r['eager_fwd']:.2f} | {r['raw_fwd']:.2f} | "
              f"{r['eager_fwd'] / r['raw_fwd']:.2f}x | {r['bwd_one']:.2f} | {node_s} | "
              f"{r['raw_vjp']:.2f} | {r['bwd_one'] / r['raw_vjp']:.2f}x | {node_ratio} |")


if __name__ == "__main__":
    main()
