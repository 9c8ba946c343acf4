"""Functions the per-rank tests run in 2 processes through `dist.launcher` (spawned workers
import them by name, so they live at the top of a module). Each returns plain values that the
test compares in the parent."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import eager as eg
import eager.distributed as dist
from eager.autodiff import GradManager
from partial import partial_trace

from . import training


def rank_data(r: int, shape: tuple) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 10.0 * r) / 7.0


@dist.launcher(n_gpus=2)
def collectives(compiled: bool = False) -> dict:
    """Each collective's value and its gradient for the loss sum(w * out) with rank-dependent
    inputs and weights (the gradient then says which rank's cotangent reached which input),
    eagerly or, with `compiled`, inside a partial_trace region."""
    r = dist.get_rank()
    out = {"rank": r, "world": dist.get_world_size(), "distributed": dist.is_distributed()}
    fns = {"all_reduce_sum": dist.functional.all_reduce_sum,
           "all_reduce_max": dist.functional.all_reduce_max,
           "all_reduce_min": dist.functional.all_reduce_min,
           "all_gather": dist.functional.all_gather,
           "broadcast": lambda t: dist.functional.broadcast(t, src=1),
           "reduce_scatter_sum": dist.functional.reduce_scatter_sum}
    if compiled:  # each collective inside a partial_trace region, compiled per rank
        fns = {name: partial_trace(fn) for name, fn in fns.items()}
    for name, fn in fns.items():
        flip = name in ("all_reduce_max", "all_reduce_min") and r == 1  # ranks interleave
        x = eg.tensor(rank_data(r, (4, 3)) * (-1 if flip else 1))
        gm = GradManager().attach([x])
        with gm:
            y = fn(x)
            w = eg.tensor(np.full(y.shape, r + 1.0, np.float32))
            gm.backward((y * w).sum())
        out[name] = (y.numpy().tolist(), x.grad.numpy().tolist())
    return out


@dist.launcher(n_gpus=2)
def sync_observers(compiled: bool = False) -> dict:
    """The sync observers' statistics after three rank-dependent batches (rank 1's negated, so
    each rank holds one end of the range), eagerly or inside a partial_trace region."""
    from eager.quantization import SyncExponentialMovingAverageObserver, SyncMinMaxObserver

    r = dist.get_rank()
    observers = {"minmax": SyncMinMaxObserver(), "ema": SyncExponentialMovingAverageObserver()}
    for obs in observers.values():
        observe = partial_trace(lambda x, obs=obs: obs(x) * 1) if compiled else obs
        for i in range(3):
            observe(eg.tensor(rank_data(r, (2, 3)) * (i + 1) * (-1 if r else 1)))
    return {name: [float(obs.min_val.numpy()), float(obs.max_val.numpy())]
            for name, obs in observers.items()}


TRAINING_CASES = [(k, o, m) for k in ("mlp", "cnn") for o in ("sgd", "adam")
                  for m in ("eager", "partial_trace", "xla_trace")] + [
                      ("mlp", "sgd", "partial_trace+gmcallback"),
                      ("cnn", "adam", "partial_trace+gmcallback")]


@dist.launcher(n_gpus=2)
def train(cases: list) -> dict:
    """For each (model, optimizer, mode) case, rank r trains on its half of each batch with
    SyncBatchNorm and an averaging all-reduce callback (under partial_trace SyncBatchNorm's
    collectives are compiled into the segment, under xla_trace the callback's all-reduce too;
    with trace_gmcallback, under partial_trace too); returns its final states, how often the
    callback's Python ran, and the single-process references on the whole batch."""
    r, world = dist.get_rank(), dist.get_world_size()
    half = training.BATCH // world
    states, references, python_calls = {}, {}, {}
    for kind, optimizer, mode in cases:
        net = training.build(kind, sync_bn=True)
        case = f"{kind}-{optimizer}-{mode}"
        allreduce = dist.make_allreduce_cb("mean")

        def counted(p: Any, g: Any, case: str = case, allreduce: Any = allreduce) -> Any:
            python_calls[case] = python_calls.get(case, 0) + 1
            return allreduce(p, g)

        step, _ = training.make_step(net, optimizer, mode, callbacks=[counted])
        for x, y in training.batches(kind):
            step(eg.tensor(x[r * half:(r + 1) * half]), eg.tensor(y[r * half:(r + 1) * half]))
        states[case] = training.state(net)
        if (kind, optimizer) not in references:
            references[(kind, optimizer)] = training.reference(kind, optimizer)
    return {"states": states, "python_calls": python_calls,
            "references": {f"{k}-{o}": v for (k, o), v in references.items()}}


@dist.launcher(n_gpus=2)
def broadcast_and_save(path: str) -> list:
    """Parameters differ per rank until `bcast_list_`; rank 0 alone saves a checkpoint."""
    net = training.build("mlp")
    for p in net.parameters():
        eg.rebind(p, eg.read(p) + dist.get_rank())
    dist.bcast_list_(net.parameters())
    if dist.get_rank() == 0:
        eg.save(net.state_dict(), path)
    dist.group_barrier()
    return [p.numpy() for p in net.parameters()]


@dist.launcher(n_gpus=2)
def fails(how: str) -> int:
    """Rank 1 raises or dies; rank 0 waits in a collective for it (and would hang alone)."""
    if dist.get_rank() == 1:
        if how == "raise":
            raise ValueError("rank 1 gave up on purpose")
        os._exit(3)
    dist.functional.all_reduce_sum(eg.tensor([1.0])).numpy()
    return os.getpid()


@dist.launcher(n_gpus=2)
def pid() -> int:
    return os.getpid()


@dist.launcher(n_gpus=2)
def train_global(cases: list) -> dict:
    """The global-array style across 2 processes: each passes its half of every batch to
    `dist.shard_batch` (which makes the global batch), the model and optimizer are replicated
    over the mesh of both processes' devices; returns the final states and references."""
    r, world = dist.get_rank(), dist.get_world_size()
    half = training.BATCH // world
    states, references = {}, {}
    for kind, optimizer, mode in cases:
        net = training.build(kind)
        step, opt = training.make_step(net, optimizer, mode)
        dist.replicate(net)
        dist.replicate(opt)
        for x, y in training.batches(kind):
            step(dist.shard_batch(x[r * half:(r + 1) * half]),
                 dist.shard_batch(y[r * half:(r + 1) * half]))
        states[f"{kind}-{optimizer}-{mode}"] = training.state(net)
        if (kind, optimizer) not in references:
            references[(kind, optimizer)] = training.reference(kind, optimizer)
    return {"states": states,
            "references": {f"{k}-{o}": v for (k, o), v in references.items()}}


SHARDED_CASES = [(k, o, m, s) for k in ("mlp", "cnn", "gpt") for o in ("sgd", "adam")
                 for m in ("eager", "partial_trace+head", "xla_trace") for s in (3, 1)]


@dist.launcher(n_gpus=2)
def train_sharded(cases: list) -> dict:
    """`dist.shard_params` across 2 processes: parameters and optimizer state split over the
    devices of both, each process passing its half of every batch; returns the final states
    (gathered whole in every process), whether any array lay over both processes, and the
    one-device references."""
    from jax.experimental import multihost_utils

    r, world = dist.get_rank(), dist.get_world_size()
    half = training.BATCH // world
    states, spread = {}, {}
    for kind, optimizer, mode, stage in cases:
        net = training.build(kind)
        step, opt = training.make_step(net, optimizer, mode)
        dist.shard_params([net, opt], stage=stage, min_size=16)
        for x, y in training.batches(kind):
            step(dist.shard_batch(x[r * half:(r + 1) * half]),
                 dist.shard_batch(y[r * half:(r + 1) * half]))
        arrays = dict(net.named_parameters()) | dict(net.named_buffers())
        case = f"{kind}-{optimizer}-{mode}-{stage}"
        spread[case] = any(not eg.read(t).is_fully_addressable for t in arrays.values())
        states[case] = {k: np.asarray(multihost_utils.process_allgather(eg.read(t), tiled=True))
                        for k, t in arrays.items()}
    references = {f"{k}-{o}": training.reference(k, o) for k, o in {c[:2] for c in cases}}
    return {"states": states, "spread": spread, "references": references}


@dist.launcher(n_gpus=2)
def rank_batches() -> dict:
    """What a rank's DataLoader yields when its sampler is given no world_size or rank (and no
    seed): one epoch of the labels of 23 samples in batches of 3, made by a worker process."""
    from eager.data import ArrayDataset, DataLoader, RandomSampler

    data = ArrayDataset(np.arange(23, dtype=np.float32), np.arange(23))
    sampler = RandomSampler(data, 3)
    batches = [y.tolist() for _, y in DataLoader(data, sampler, num_workers=1)]
    return {"rank": dist.get_rank(), "sampler": (sampler.world_size, sampler.rank),
            "batches": batches}
