"""The digits demo trained data-parallel in MegEngine's per-rank style: 2 processes on CPU.

`dist.launcher` starts one process per rank. Each rank reads the same dataset through a
`DataLoader` whose `RandomSampler` is the distributed one, as in MegEngine: inside a process
group it takes the group's `world_size` and `rank`, draws the same order on every rank (one
seed) and gives each rank a disjoint shard, so together the ranks cover each global batch once.
Each rank builds the demo's model (`examples/demo.py`: a CNN
backbone under `partial_trace`, a dynamic eager head) with three changes:

- its BatchNorm2d layers become `M.SyncBatchNorm`, whose statistics cover the whole global
  batch (their collectives are compiled into the backbone's segment);
- `dist.bcast_list_` gives every rank rank 0's initial parameters;
- `GradManager(...).attach(params, callbacks=[dist.make_allreduce_cb("mean")])` averages each
  gradient over the ranks; the callback runs eagerly, on the segment's gradients too.

So every rank takes the same optimizer step, and the ranks end with identical parameters: each
returns a checksum of its parameters and buffers, which the parent compares. Rank 0 alone shows
progress, evaluates the test accuracy and saves the checkpoint.

    python examples/data_parallel.py                   # 2 processes, 4 epochs
    python examples/data_parallel.py --procs 4 --epochs 2 --out /tmp/dp
    python examples/data_parallel.py --help

On several hosts, start the same function on each with `dist.launcher(train_rank, n_gpus=...,
world_size=..., rank_start=..., master_ip=..., port=...)` or call `dist.init_process_group` in
every process yourself: see "Scaling out" in docs/guide.md.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from demo import Data, Model, load_data
from tqdm import tqdm

import eager as eg
import eager.distributed as dist
import eager.module as M
from eager.data import ArrayDataset, DataLoader, RandomSampler


def convert_sync_batchnorm(module: M.Module) -> M.Module:
    """Replace every BatchNorm2d inside `module` by a SyncBatchNorm holding the same parameter
    and statistics tensors (so optimizers and GradManagers that hold them need no change)."""
    for parent in module.modules():
        for name, child in list(parent.named_children()):
            if type(child) is M.BatchNorm2d:
                sync = M.SyncBatchNorm(child.num_features, child.eps, child.momentum)
                sync.weight, sync.bias = child.weight, child.bias
                sync.running_mean, sync.running_var = child.running_mean, child.running_var
                setattr(parent, name, sync)
    return module


class DataParallelModel(Model):
    """The demo's model in partial mode (compiled backbone, eager dynamic head), with
    SyncBatchNorm, rank 0's initial parameters and gradients averaged over the ranks."""

    def __init__(self, lr: float = 0.05) -> None:
        super().__init__("partial", lr)
        convert_sync_batchnorm(self.backbone)
        params = self.gm.attached_tensors()
        dist.bcast_list_(params)
        self.gm.attach(params, callbacks=[dist.make_allreduce_cb("mean")])

    def state(self) -> dict[str, dict[str, np.ndarray]]:
        return {"backbone": self.backbone.state_dict(), "head": self.head.state_dict()}


def state_digest(state: dict[str, dict[str, Any]]) -> str:
    """SHA-256 of every array of a `DataParallelModel.state()` (or of its checkpoint), by name."""
    h = hashlib.sha256()
    for part in sorted(state):
        for name in sorted(state[part]):
            h.update(f"{part}.{name}".encode())
            h.update(np.ascontiguousarray(np.asarray(state[part][name])).tobytes())
    return h.hexdigest()


def rank_loader(data: Data, batch_size: int, seed: int) -> DataLoader:
    """This rank's share of each shuffled global batch of `batch_size`: the sampler fills in
    `world_size` and `rank` from the process group, so each rank's batches hold
    `batch_size // world_size` samples of its own shard."""
    train = ArrayDataset(data.train_x, data.train_y)
    per_rank = batch_size // dist.get_world_size()
    return DataLoader(train, RandomSampler(train, per_rank, drop_last=True, seed=seed),
                      preload=True)


def train_epoch(model: DataParallelModel, batches: DataLoader,
                desc: str) -> tuple[float, list[float]]:
    """One epoch on this rank's shards; (mean local loss, seconds of each step)."""
    steps = len(batches)
    bar = tqdm(batches, total=steps, desc=desc, unit="step", disable=dist.get_rank() != 0)
    total, times = 0.0, []
    for i, (x, y) in enumerate(bar, 1):
        start = time.perf_counter()
        total += model.step(x, y).item()  # reading the loss waits for the step
        times.append(time.perf_counter() - start)
        bar.set_postfix(loss=f"{total / i:.3f}")
    bar.close()
    return total / steps, times


def train_rank(epochs: int, batch_size: int, seed: int, out: str) -> dict[str, Any]:
    """What each rank runs: train, then (rank 0) evaluate and save; returns this rank's
    parameter digest, its step times and, on rank 0, the test accuracy."""
    rank = dist.get_rank()
    data = load_data(seed)
    eg.random.seed(seed + rank)  # different on purpose: bcast_list_ makes the ranks agree
    model = DataParallelModel()
    batches = rank_loader(data, batch_size, seed)
    times: list[float] = []
    accuracy = None
    for epoch in range(1, epochs + 1):
        loss, epoch_times = train_epoch(model, batches, f"epoch {epoch}/{epochs}")
        times += epoch_times
        if rank == 0:
            accuracy = model.accuracy(data.test_x, data.test_y)
            print(f"epoch {epoch}: rank 0 mean loss {loss:.4f}, test accuracy {accuracy:.3f}",
                  flush=True)
    state = model.state()
    if rank == 0:
        eg.save(state, out)
    dist.group_barrier()
    return {"rank": rank, "digest": state_digest(state), "times": times, "accuracy": accuracy}


def report(results: list[dict[str, Any]], batch_size: int, out: str, seconds: float) -> bool:
    """Print accuracy, speed and each rank's parameter digest; whether the digests agree."""
    first = results[0]
    times = first["times"][1:]  # the first step captures and compiles the backbone
    print(f"final test accuracy {first['accuracy']:.3f} (rank 0)")
    print(f"{len(first['times'])} steps of {batch_size} images over {len(results)} processes: "
          f"{len(times) / sum(times):.1f} steps/s after the first step (which took "
          f"{first['times'][0]:.2f} s); {seconds:.1f} s in all, including process start")
    for res in results:
        print(f"rank {res['rank']} parameters sha256 {res['digest']}")
    same = len({res["digest"] for res in results}) == 1
    print("parameters identical on all ranks" if same else "PARAMETERS DIFFER BETWEEN RANKS")
    print(f"checkpoint (rank 0) {out}")
    return same


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Train the digits demo's CNN data-parallel on several processes on CPU, "
                    "in MegEngine's per-rank style (dist.launcher, SyncBatchNorm, an "
                    "all-reduce GradManager callback); see 'Scaling out' in docs/guide.md.")
    parser.add_argument("--procs", type=int, default=2,
                        help="processes, one rank each (default 2)")
    parser.add_argument("--epochs", type=int, default=4, help="training epochs (default 4)")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="global batch size, split over the ranks (default 64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data split, init, order")
    parser.add_argument("--out", default=None,
                        help="checkpoint path, written by rank 0 (default: in a new temp dir)")
    args = parser.parse_args(argv)
    if args.procs < 1 or args.batch_size % args.procs:
        parser.error(f"--batch-size {args.batch_size} must divide by --procs {args.procs}")
    out = args.out or str(Path(tempfile.mkdtemp(prefix="data_parallel_")) / "model.eg")
    print(f"{args.procs} processes, global batch {args.batch_size} "
          f"({args.batch_size // args.procs} per rank), {args.epochs} epochs", flush=True)
    start = time.perf_counter()
    results = dist.launcher(train_rank, n_gpus=args.procs)(
        args.epochs, args.batch_size, args.seed, out)
    if not report(results, args.batch_size, out, time.perf_counter() - start):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
