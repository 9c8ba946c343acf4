"""Run in a fresh process with 4 virtual CPU devices (jax must not have started): trains every
model, optimizer and mode with parameters and optimizer state split over the devices by
`dist.shard_params` (stage 3; stage 2: the state and the gradients; stage 1: the state only)
and the batch split too, and prints, as JSON, each case's largest difference from eager
single-device training on the whole batch and whether every tensor kept the layout it was
given."""

from __future__ import annotations

import json
import sys

import jax
from jax.sharding import PartitionSpec

import eager as eg
import eager.distributed as dist

from . import training

DEVICES = 4
KINDS = ("mlp", "cnn", "gpt")
OPTIMIZERS = ("sgd", "adam")
MODES = ("eager", "partial_trace", "partial_trace+head", "xla_trace")
STAGES = (3, 2, 1)


def tensors(net: eg.module.Module, opt: eg.optimizer.Optimizer) -> dict[str, eg.Tensor]:
    named = dict(net.named_parameters()) | dict(net.named_buffers())
    index = {p: n for n, p in net.named_parameters()}
    for p, slots in opt.state.items():
        named |= {f"{index[p]}.{k}": t for k, t in slots.items()}
    return named


def by_rows(name: str, t: eg.Tensor) -> PartitionSpec | None:
    return PartitionSpec("data") if t.ndim == 2 and t.shape[0] % DEVICES == 0 else None


def run(kind: str, optimizer: str, mode: str, stage: int, whole: bool = False) -> dict:
    net = training.build(kind)
    step, opt = training.make_step(net, optimizer, mode)
    # a whole batch goes with weights split along their output features (a layout named per
    # parameter), so the backbone's output comes out split over features
    specs = by_rows if whole else None
    dist.shard_params([net, opt], stage=stage, min_size=16, specs=specs)
    placed = {n: t.sharding for n, t in tensors(net, opt).items()}
    for x, y in training.batches(kind):
        if whole:  # the batch as it is (not split): XLA lays the activations out as it likes
            step(eg.tensor(x), eg.tensor(y))
        else:
            step(dist.shard_batch(x), dist.shard_batch(y))
    after = tensors(net, opt)
    moved = sorted(n for n, s in placed.items()
                   if not after[n].sharding.is_equivalent_to(s, after[n].ndim))
    split = [n for n, s in placed.items() if not s.is_fully_replicated]
    return {"error": training.max_error(training.state(net), training.reference(kind, optimizer)),
            "moved": moved, "split": len(split), "grads unlike state": grads_unlike_state(opt)}


def grads_unlike_state(opt: eg.optimizer.Optimizer) -> int:
    """How many parameters' last gradients are laid out otherwise than their optimizer state
    (stage 2 lays them out alike; the others leave gradients as they come)."""
    unlike = 0
    for p, slots in opt.state.items():
        state = [t for t in slots.values() if t.shape == p.shape]
        if state and not p.grad.sharding.is_equivalent_to(state[0].sharding, p.ndim):
            unlike += 1
    return unlike


def main() -> None:
    # Set here, not at import: pytest's doctest collection imports this module in its own
    # workers, where a module-level setting gave that whole worker 4 devices.
    jax.config.update("jax_num_cpu_devices", DEVICES)
    only = sys.argv[1] if len(sys.argv) > 1 else ""  # a substring of the cases to run
    out: dict = {f"{k}-{o}-{m}-{s}": run(k, o, m, s) for k in KINDS for o in OPTIMIZERS
                 for m in MODES for s in STAGES if only in f"{k}-{o}-{m}-{s}"}
    # The backbone's output split over features, the head's gradient replicated: the
    # segment's backward must take the gradient in a layout it was not compiled for.
    out |= {f"{k}-sgd-partial_trace+head-3-whole": run(k, "sgd", "partial_trace+head", 3, True)
            for k in KINDS if only in f"{k}-sgd-partial_trace+head-3-whole"}
    out["devices"] = jax.device_count()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
