"""Data-parallel training steps of the cnn (with BatchNorm) and the mlp on 1, 2 and 4 devices.

Run `python -m benchmarks.data_parallel [--devices 1,2,4] [--steps 5] [--batch N] [--cpu]`.

Each device count runs in a fresh process (jax fixes its devices when its backend starts): with
`JAX_NUM_CPU_DEVICES=<n>` on the CPU, or the first n real accelerators where jax has some (a
count beyond what exists is skipped; `--cpu` forces virtual CPU devices). There the step of
`benchmarks.workloads` runs in the global-array style of `eager.distributed`: the global batch
(the workload's canonical one, or `--batch` rows) is split over a 1-D mesh with
`dist.shard_batch`, the model and the SGD-with-momentum state are put on every device with
`dist.replicate`, and XLA inserts the all-reduces. Modes: `xla` compiles the whole step with
`xla_trace`; `partial` compiles the backbone's forward and backward with `partial_trace` and runs
head, loss and optimizer eagerly. Per row:

- step ms: median over at least `--steps` timed steps (more when steps are short, up to about
  half a second of steps) after two warmup steps, each synced on its loss and the whole state;
- speed-up and efficiency: the 1-device step time of the same workload, mode and global batch
  over this one, and that divided by the device count;
- all-reduce ops and KB: read from the optimized HLO (`as_text(optimized=True)`) of every
  executable of the compiled segment a step runs (`fn.segments()[-1].executables()`): each
  `all-reduce` (or `all-reduce-start`) op and the bytes of its operands. This counts the
  gradients and also the BatchNorm batch statistics, which over a sharded batch are global
  (SyncBatchNorm semantics). For `partial` it covers the compiled backbone only: the eager
  head's gradient and loss reductions run as separate per-op programs that are not counted.
  `grads KB` is the byte size of all parameter gradients, for comparison;
- all-reduce ms and share: the same all-reduce ops (same operand shapes, in the same order)
  replayed alone in a `jax.jit` of `lax.psum` under `jax.shard_map` on the same mesh, median
  over 20 synced calls, divided by the step time. Each op's first operand gets zero times an
  element of the previous op's result added, a data dependency that keeps XLA from merging the
  ops into one (XLA:CPU drops optimization barriers before its all-reduce combiner); it costs one
  elementwise pass over that operand. The notes flag a replay that compiled to a different
  number of all-reduce ops than the step. This is the cost of the communication without the
  compute around it: it ignores any overlap with compute (the step can hide some of it) and any
  contention with it (the step can make it slower), so read it as an estimate, not a profile.

Virtual CPU devices share the machine's cores, so more of them split the same work into more
pieces on the same cores: the "speed-up" there measures the cost of the partitioning and of the
collectives, not a gain. Each device count is timed in its own process minutes apart, so machine
drift (10-20% on a shared VM) enters the ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

import eager.distributed as dist
from benchmarks.workloads import PartialRunner, Runner, XlaRunner, make_batch

WORKLOADS = ("cnn", "mlp")
MODES = {"xla": XlaRunner, "partial": PartialRunner}
WARMUP = 2
MIN_TIMED_SECONDS = 0.5
REPLAY_CALLS = 20
ROOT = Path(__file__).resolve().parents[1]
# `%name = <shape or tuple of shapes> all-reduce(` and its async form on GPUs.
_ALL_REDUCE = re.compile(r"=\s*(.*?)\s+all-reduce(?:-start)?\(")
_SHAPE = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")
_DTYPES = {"f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16, "f64": jnp.float64,
           "s32": jnp.int32, "s64": jnp.int64, "u32": jnp.uint32, "s8": jnp.int8, "u8": jnp.uint8}


# ----- reading the compiled step ----------------------------------------------------------------
def all_reduces(hlo: str) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The all-reduce ops of an optimized HLO module, each as its operands' (dtype, shape).

    >>> all_reduces("%a = (f32[], f32[2,3]{1,0}) all-reduce(%x, %y), channel_id=1")
    [[('f32', ()), ('f32', (2, 3))]]
    """
    ops = []
    for line in hlo.splitlines():
        found = _ALL_REDUCE.search(line)
        if found:
            ops.append([(dtype, tuple(int(d) for d in dims.split(",") if d))
                        for dtype, dims in _SHAPE.findall(found.group(1))])
    return ops


def nbytes(ops: list) -> int:
    """Bytes of the operands of `ops` (as `all_reduces` returns them)."""
    return sum(math.prod(shape) * jnp.dtype(_DTYPES.get(dtype, jnp.uint8)).itemsize
               for op in ops for dtype, shape in op)


def step_all_reduces(runner: Runner, mode: str) -> list:
    """The all-reduce ops of one step: those of every executable of the most recently used
    compiled segment (the whole step for `xla`; the backbone's forward and backward for
    `partial`)."""
    traced = runner._step if mode == "xla" else runner.backbone
    segment = traced.segments()[-1]
    return [op for exe in segment.executables().values()
            for op in all_reduces(exe.as_text(optimized=True))]


# ----- replaying the all-reduces alone ----------------------------------------------------------
def replay(ops: list, mesh: Any) -> tuple[Any, list]:
    """A jitted function doing the all-reduces `ops` one after another on `mesh`, and its
    inputs: per operand an array with one block of the operand's shape per device."""
    axis = mesh.axis_names[0]
    n = mesh.devices.size
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    inputs = [jax.device_put(jnp.ones((n, *shape), _DTYPES.get(dtype, jnp.uint8)), sharding)
              for op in ops for dtype, shape in op]

    def body(*blocks: Any) -> tuple:
        outs: list = []
        prev = None
        it = iter(blocks)
        for op in ops:
            ins = tuple(next(it) for _ in op)
            if prev is not None:  # depends on the previous op, so XLA cannot merge the two
                ins = (ins[0] + 0 * prev[0].ravel()[0].astype(ins[0].dtype), *ins[1:])
            prev = lax.psum(ins, axis)
            outs.extend(prev)
        return tuple(outs)

    spec = PartitionSpec(axis)
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
    return fn, inputs


def all_reduce_seconds(ops: list, mesh: Any) -> tuple[float, int]:
    """Median seconds of the replayed all-reduces `ops`, and how many all-reduce ops XLA
    compiled them into (to check the replay matches the step)."""
    if not ops:
        return 0.0, 0
    fn, inputs = replay(ops, mesh)
    compiled = fn.lower(*inputs).compile()
    for _ in range(3):
        jax.block_until_ready(compiled(*inputs))
    times = []
    for _ in range(REPLAY_CALLS):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*inputs))
        times.append(time.perf_counter() - start)
    return statistics.median(times), len(all_reduces(compiled.as_text()))


# ----- one device count (child process) ---------------------------------------------------------
def global_batch(name: str, batch: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The workload's canonical batch, or its first `batch` rows (repeated when it has fewer)."""
    x, y = make_batch(name)
    if batch is None:
        return x, y
    reps = -(-batch // len(x))
    return np.concatenate([x] * reps)[:batch], np.concatenate([y] * reps)[:batch]


def data_parallel(name: str, mode: str, mesh: Any, batch: int | None) -> Runner:
    """The workload's runner with its batch sharded over `mesh` and its model and optimizer
    state replicated on it."""
    runner = MODES[mode](name)
    x, y = global_batch(name, batch)
    runner.x, runner.y = dist.shard_batch(x, mesh), dist.shard_batch(y.reshape(-1), mesh)
    dist.replicate(runner.model, mesh)
    dist.replicate(runner.opt, mesh)
    return runner


def timed_steps(runner: Runner, steps: int) -> tuple[list[float], float]:
    """Seconds of each timed step after the warmup, and the loss of the first (capture) step:
    at least `steps`, more while they add up to under `MIN_TIMED_SECONDS`."""
    first = runner.float_loss(runner.step())
    for _ in range(WARMUP - 1):
        runner.sync(runner.step())
    times: list[float] = []
    while len(times) < steps or sum(times) < MIN_TIMED_SECONDS:
        start = time.perf_counter()
        runner.sync(runner.step())
        times.append(time.perf_counter() - start)
    return times, first


def measure(name: str, mode: str, mesh: Any, steps: int, batch: int | None) -> dict:
    """One row: step time, all-reduce ops and bytes, replayed all-reduce time, first loss."""
    runner = data_parallel(name, mode, mesh, batch)
    times, first_loss = timed_steps(runner, steps)
    ops = step_all_reduces(runner, mode)
    seconds, replayed = all_reduce_seconds(ops, mesh)
    return {
        "workload": name, "mode": mode, "devices": mesh.devices.size,
        "batch": int(runner.x.shape[0]), "step_ms": statistics.median(times) * 1e3,
        "timed_steps": len(times), "all_reduce_ops": len(ops), "all_reduce_bytes": nbytes(ops),
        "grad_bytes": sum(math.prod(p.shape) * p.dtype.itemsize
                          for p in runner.model.parameters()),
        "all_reduce_ms": seconds * 1e3, "replayed_ops": replayed, "first_loss": first_loss,
        "captures": (runner._step if mode == "xla" else runner.backbone).cache_info().captures,
    }


def child(n: int, args: argparse.Namespace) -> dict:
    """Every workload and mode on a mesh of `n` devices (this process's first n)."""
    devices = jax.devices()
    kind = f"{devices[0].platform} ({devices[0].device_kind})"
    if len(devices) < n:
        return {"devices": n, "skipped": f"only {len(devices)} {kind} devices"}
    mesh = dist.mesh(devices[:n])
    rows = [measure(w, m, mesh, args.steps, args.batch)
            for w in args.workloads.split(",") for m in args.modes.split(",")]
    return {"devices": n, "kind": kind, "virtual": devices[0].platform == "cpu", "rows": rows}


# ----- the driver -------------------------------------------------------------------------------
def run_child(n: int, args: argparse.Namespace) -> dict:
    """`child(n)` in a fresh process, told to make n virtual CPU devices (which only the CPU
    backend uses); a failed child becomes a skipped device count, with its last error line."""
    env = dict(os.environ, JAX_NUM_CPU_DEVICES=str(n))
    if args.cpu:
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, "-m", "benchmarks.data_parallel", "--child", str(n),
           "--steps", str(args.steps), "--workloads", args.workloads, "--modes", args.modes]
    if args.batch is not None:
        cmd += ["--batch", str(args.batch)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"devices": n, "skipped": f"failed ({tail[0]})"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cells(row: dict, base: dict | None) -> list[str]:
    speedup = base["step_ms"] / row["step_ms"] if base else None
    share = row["all_reduce_ms"] / row["step_ms"]
    return [row["workload"], row["mode"], str(row["devices"]), str(row["batch"]),
            f"{row['step_ms']:.1f}", "n/a" if speedup is None else f"{speedup:.2f}",
            "n/a" if speedup is None else f"{speedup / row['devices']:.2f}",
            str(row["all_reduce_ops"]), f"{row['all_reduce_bytes'] / 1024:.1f}",
            f"{row['grad_bytes'] / 1024:.1f}", f"{row['all_reduce_ms']:.2f}", f"{share:.1%}"]


def baseline(rows: list[dict], row: dict) -> dict | None:
    """The 1-device row of the same workload and mode as `row`, if measured."""
    return next((b for b in rows if b["devices"] == 1 and b["workload"] == row["workload"]
                 and b["mode"] == row["mode"]), None)


def table(results: list[dict]) -> list[str]:
    """The markdown table: one row per workload, mode and device count."""
    heads = ["workload", "mode", "devices", "global batch", "step ms", "speed-up", "efficiency",
             "all-reduce ops", "all-reduced KB", "grads KB", "all-reduce ms", "all-reduce share"]
    lines = ["| " + " | ".join(heads) + " |", "| --- | --- |" + " ---: |" * (len(heads) - 2)]
    rows = [r for res in results for r in res.get("rows", [])]
    for row in sorted(rows, key=lambda r: (r["workload"], r["mode"], r["devices"])):
        base = baseline(rows, row)
        lines.append("| " + " | ".join(_cells(row, base)) + " |")
    return lines


def notes(results: list[dict]) -> list[str]:
    """Skipped device counts, loss agreement with 1 device, retraces and replay mismatches."""
    out = [f"- {r['devices']} devices skipped: {r['skipped']}" for r in results if "skipped" in r]
    rows = [r for res in results for r in res.get("rows", [])]
    for row in rows:
        base = baseline(rows, row)
        if base and row is not base:
            diff = abs(row["first_loss"] - base["first_loss"])
            out.append(f"- {row['workload']} {row['mode']} on {row['devices']} devices: first "
                       f"loss {row['first_loss']:.6f}, |diff| from 1 device {diff:.1e}")
        if row["captures"] != 1 or row["replayed_ops"] != row["all_reduce_ops"]:
            out.append(f"- {row['workload']} {row['mode']} on {row['devices']} devices: "
                       f"{row['captures']} captures (1 expected); the replay compiled to "
                       f"{row['replayed_ops']} all-reduce ops, the step has "
                       f"{row['all_reduce_ops']}")
    return out


def machine(results: list[dict]) -> str:
    """One line: cores, jax version, the devices used."""
    kinds = sorted({f"{r['kind']}{', virtual' if r['virtual'] else ''}"
                    for r in results if "kind" in r})
    return (f"{os.cpu_count()} CPU cores, Python {sys.version.split()[0]}, jax {jax.__version__},"
            f" devices: {'; '.join(kinds) or 'none'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4", help="device counts, e.g. 1,2,4")
    parser.add_argument("--steps", type=int, default=5, help="timed steps at least")
    parser.add_argument("--batch", type=int, default=None,
                        help="global batch (default: the workload's, mlp 128, cnn 64)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cpu", action="store_true", help="virtual CPU devices even on a GPU")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args)))
        return
    results = [run_child(int(n), args) for n in args.devices.split(",")]
    print("## Data-parallel training steps (global batch sharded, state replicated)\n")
    print(machine(results) + "\n")
    print("\n".join(table(results)) + "\n")
    print("\n".join(notes(results)))
    if any(r.get("virtual") for r in results):
        print("\nVirtual CPU devices share the same cores: more devices split the same work on "
              "the same cores, so the speed-up column measures the cost of partitioning and "
              "collectives, not a gain.")


if __name__ == "__main__":
    main()
