"""Run in a fresh process with 4 virtual CPU devices (jax must not have started): trains every
model, optimizer and mode in the global-array style (the batch sharded over the 4 devices,
model and optimizer replicated) and prints, as JSON, each case's largest difference from eager
single-device training on the whole batch and where its state and outputs live."""

from __future__ import annotations

import json
import sys

import jax

import eager as eg
import eager.distributed as dist
import eager.module as M

from . import training

DEVICES = 4


def replicated(t: eg.Tensor) -> bool:
    return len(t.sharding.device_set) == DEVICES and t.sharding.is_fully_replicated


def run(kind: str, optimizer: str, mode: str) -> dict:
    net = training.build(kind)
    step, opt = training.make_step(net, optimizer, mode)
    dist.replicate(net)
    dist.replicate(opt)
    for x, y in training.batches(kind):
        loss = step(dist.shard_batch(x), dist.shard_batch(y))
    got = training.state(net)
    return {
        "error": training.max_error(got, training.reference(kind, optimizer)),
        "state replicated": all(replicated(t) for t in list(net.parameters()) + [
            t for slots in opt.state.values() for t in slots.values()] + [
            b for b in net.buffers() if b is not None]),
        "loss on the mesh": len(loss.sharding.device_set) == DEVICES,
    }


def sync_bn() -> float:
    """SyncBatchNorm on a sharded batch equals BatchNorm2d on the whole batch."""
    x = training.batches("cnn")[0][0]
    a, b = M.SyncBatchNorm(1), M.BatchNorm2d(1)
    ya, yb = a(dist.shard_batch(x)), b(eg.tensor(x))
    return max(float(abs(ya.numpy() - yb.numpy()).max()),
               float(abs(a.running_var.numpy() - b.running_var.numpy()).max()))


def uneven_batch() -> str:
    try:
        dist.shard_batch(training.batches("mlp")[0][0][:6])
    except eg.DistributedError as e:
        return str(e)
    return "no error"


def main() -> None:
    # Set here, not at import: pytest's doctest collection imports this module in its own
    # workers, where a module-level setting gave that whole worker 4 devices (CI went red).
    jax.config.update("jax_num_cpu_devices", DEVICES)
    out = {f"{k}-{o}-{m}": run(k, o, m) for k in ("mlp", "cnn") for o in ("sgd", "adam")
           for m in ("eager", "partial_trace", "xla_trace")}
    out["sync_bn"] = sync_bn()
    out["uneven batch"] = uneven_batch()
    out["devices"] = jax.device_count()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
