"""The GPT workload trained with its parameters and Adam state split over 4 devices (ZeRO-3 /
FSDP in the global-array style), checkpointed sharded, and resumed from the checkpoint.

On CPU the 4 devices are virtual (`jax_num_cpu_devices`); on a machine with accelerators pass
`--devices 0` to use every real one. The backbone runs under `partial_trace` (one compiled
forward and backward), the head, loss and optimizer eagerly: `dist.shard_params` is the only
line that differs from one-device training. Halfway, every process writes the shards its
devices hold (`dist.save_checkpoint`); a fresh model and optimizer then read them back
(`dist.load_checkpoint`, straight onto their layout) and train the second half, which must end
where the uninterrupted run ended.

    python examples/sharded_gpt.py                       # 4 virtual devices, 2 x 10 steps
    python examples/sharded_gpt.py --steps 20 --out /tmp/gpt-ckpt
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

# A GPU sums some values (scatter-adds, such as the embedding's gradient) with atomic adds that
# land in whatever order its threads finish, so two identical runs differ in the last bits, and
# ten Adam steps grow that to ~1e-4. The resume check at the end asks for the same bits, so ask
# XLA for its deterministic kernels (set before jax starts its backend; no effect on CPU).
os.environ["XLA_FLAGS"] = " ".join(
    filter(None, [os.environ.get("XLA_FLAGS"), "--xla_gpu_deterministic_ops=true"]))

import jax
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the GPT workload lives in benchmarks/workloads.py


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, default=4,
                   help="virtual CPU devices to make (0: use the devices jax finds)")
    p.add_argument("--steps", type=int, default=10, help="steps before and after the resume")
    p.add_argument("--out", type=Path, default=None, help="checkpoint folder (default: temp)")
    return p.parse_args()


def build(workloads, eg, dist, optim):
    """The GPT workload's model (its fixed initial weights) and Adam, split over the mesh."""
    model = workloads.build_model("gpt")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    dist.shard_params([model, opt])
    return model, opt


def train(model, opt, steps: int, first: int, eg, dist, F, partial_trace, GradManager):  # noqa: N803 (the modules main imports)
    """`steps` steps on the deterministic batches number `first ...`; returns the losses."""
    gm = GradManager().attach(model.parameters())
    backbone = partial_trace(model.backbone)
    losses = []
    for i in range(first, first + steps):
        tokens = np.random.default_rng(i).integers(0, 256, (16, 65)).astype(np.int32)
        x, y = dist.shard_batch(tokens[:, :-1]), dist.shard_batch(tokens[:, 1:])
        with gm:
            loss = F.cross_entropy(model.classify(backbone(x)), y.reshape(-1))
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(float(loss.item()))
    return losses


def per_device_bytes(model, opt) -> int:
    """Bytes of parameters and optimizer state on the first device."""
    import eager as eg

    tensors = list(model.parameters()) + [t for s in opt.state.values() for t in s.values()]
    return sum(eg.read(t).addressable_shards[0].data.nbytes for t in tensors)


def main() -> None:
    args = parse()
    if args.devices:
        jax.config.update("jax_num_cpu_devices", args.devices)
    import eager as eg
    import eager.distributed as dist
    import eager.functional as F
    import eager.optimizer as optim
    from benchmarks import workloads
    from eager.autodiff import GradManager
    from partial import partial_trace

    folder = args.out or Path(tempfile.mkdtemp(prefix="sharded-gpt-"))
    tools = (eg, dist, F, partial_trace, GradManager)
    print(f"{jax.device_count()} devices; checkpoints in {folder}")

    model, opt = build(workloads, eg, dist, optim)
    whole = sum(eg.read(t).nbytes for t in model.parameters()) * 3  # params + Adam's 2 moments
    print(f"parameters + Adam state: {whole / 2**20:.2f} MiB in all, "
          f"{per_device_bytes(model, opt) / 2**20:.2f} MiB on each device")
    start = time.perf_counter()
    first = train(model, opt, args.steps, 0, *tools)
    print(f"steps 1-{args.steps}: loss {first[0]:.4f} -> {first[-1]:.4f} "
          f"({args.steps / (time.perf_counter() - start):.1f} steps/s)")
    path = dist.save_checkpoint(folder, {"model": model, "opt": opt, "step": args.steps},
                                step=args.steps, keep=2)
    print(f"saved {path}")
    straight = train(model, opt, args.steps, args.steps, *tools)

    fresh, fresh_opt = build(workloads, eg, dist, optim)
    state = dist.load_checkpoint(folder, {"model": fresh, "opt": fresh_opt, "step": 0})
    resumed = train(fresh, fresh_opt, args.steps, state["step"], *tools)
    print(f"resumed at step {state['step']}: loss {resumed[0]:.4f} -> {resumed[-1]:.4f}")
    gap = max(float(np.max(np.abs(np.asarray(jax.device_get(eg.read(a)))
                                  - np.asarray(jax.device_get(eg.read(b))))))
              for a, b in zip(model.parameters(), fresh.parameters()))
    print(f"resumed vs uninterrupted: losses {'equal' if resumed == straight else 'differ'}, "
          f"largest parameter difference {gap:.2e}")
    if resumed != straight or gap > 1e-6:
        sys.exit("the resumed run did not end where the uninterrupted one did")


if __name__ == "__main__":
    main()
