"""What the sharded-checkpoint tests run outside the test process: on 4 virtual devices
(`python -m tests.distributed.checkpoint_workers devices DIR`, printing JSON), in 2 processes of
one device each (the `dist.launcher` functions), and a save that stalls at its commit until it
is killed (`... stall DIR`, which first says whether importing eager imported orbax)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import eager as eg
import eager.distributed as dist
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from eager.distributed.checkpoint import load_checkpoint, save_checkpoint


def build(seed: int = 0) -> tuple[M.Module, optim.Optimizer]:
    """An MLP whose every tensor's first axis splits over 4 devices, and its Adam."""
    np.random.seed(seed)
    eg.random.seed(seed)
    net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 4))
    return net, optim.Adam(net.parameters(), lr=0.01)


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.standard_normal((8, 8), np.float32), rng.standard_normal((8, 4), np.float32)


def train(net: M.Module, opt: optim.Optimizer, steps: int) -> float:
    x, y = (eg.tensor(a) for a in batch())
    gm = GradManager().attach(net.parameters())
    for _ in range(steps):
        with gm:
            loss = ((net(x) - y) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
    return float(loss.numpy())


def tensors(net: M.Module, opt: optim.Optimizer) -> list[eg.Tensor]:
    return net.parameters() + [t for slots in opt.state.values() for t in slots.values()]


def place(net: M.Module, opt: optim.Optimizer, sharding_of: Any) -> None:
    """Every parameter and optimizer slot laid out by `sharding_of(tensor)` (an array that
    spans processes is made from each process's part of the same global value)."""
    for t in tensors(net, opt):
        value, sharding = np.asarray(eg.read(t)), sharding_of(t)
        eg.rebind(t, jax.make_array_from_callback(value.shape, sharding, lambda i, v=value: v[i]))


def sharded(mesh: Mesh) -> Any:
    """Dim 0 split over `mesh` (scalars, such as Adam's step count, replicated)."""
    return lambda t: NamedSharding(mesh, P("data") if t.ndim else P())


def values(net: M.Module, opt: optim.Optimizer) -> list:
    return [np.asarray(eg.read(t)).tolist() for t in tensors(net, opt)]


def layouts(net: M.Module, opt: optim.Optimizer) -> list:
    return [[len(t.sharding.device_set), str(getattr(t.sharding, "spec", None))]
            for t in tensors(net, opt)]


def devices(directory: str) -> dict:
    """On 4 devices: save a model and Adam sharded over all 4; load the checkpoint into a model
    sharded over 2, one replicated over 4 and one left uncommitted; report values and layouts
    (and the next step's loss, which must equal an uninterrupted run's)."""
    jax.config.update("jax_num_cpu_devices", 4)
    mesh4 = Mesh(np.array(jax.devices()), ("data",))
    mesh2 = Mesh(np.array(jax.devices()[:2]), ("data",))
    net, opt = build()
    place(net, opt, sharded(mesh4))
    train(net, opt, 2)
    saved_layouts = layouts(net, opt)
    save_checkpoint(directory, {"model": net, "opt": opt, "epoch": 2}, step=2)
    out: dict[str, Any] = {"devices": jax.device_count(), "saved": values(net, opt),
                           "saved layouts": saved_layouts,
                           "next loss": train(net, opt, 1)}
    for name, sharding_of in [("2 devices", sharded(mesh2)),
                              ("replicated", lambda t: NamedSharding(mesh4, P()))]:
        net2, opt2 = build(seed=5)
        place(net2, opt2, sharding_of)
        before = layouts(net2, opt2)
        got = load_checkpoint(directory, {"model": net2, "opt": opt2, "epoch": 0})
        out[name] = {"values": values(net2, opt2), "layouts before": before,
                     "layouts after": layouts(net2, opt2), "epoch": got["epoch"],
                     "next loss": train(net2, opt2, 1)}
    net3, opt3 = build(seed=5)  # as built: uncommitted arrays, which must stay so
    load_checkpoint(directory, {"model": net3, "opt": opt3})
    out["uncommitted"] = {"values": values(net3, opt3),
                          "committed": [eg.read(t).committed for t in tensors(net3, opt3)]}
    return out


def stall(directory: str) -> None:
    """Save step 1, then start step 2 (about 8 MB, keep=1) and stop just before its commit
    (every byte written, the temporary folder not yet renamed), saying "saving"; the test
    kills this process there."""
    from orbax.checkpoint._src.path import atomicity

    save_checkpoint(directory, {"w": eg.tensor(np.full((4, 4), 1.0, np.float32)), "n": 1}, 1)

    async def never_commit(self: Any) -> None:
        print("saving", flush=True)
        time.sleep(600)

    atomicity.AtomicRenameTemporaryPath.finalize = never_commit
    save_checkpoint(directory, {"w": eg.tensor(np.full((1024, 2048), 2.0, np.float32)),
                                "n": 2}, 2, keep=1)


# ----- 2 processes, one device each ------------------------------------------------------------
def global_value(shape: tuple[int, ...], offset: float) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 10 + offset


def _over_processes(shapes: dict[str, tuple[int, ...]], offset: float) -> dict[str, eg.Tensor]:
    """Tensors split over both processes along dim 0 (each process holds half)."""
    sharding = NamedSharding(dist.mesh(), P("data"))
    values = {k: global_value(s, offset) for k, s in shapes.items()}
    return {k: eg.Tensor(jax.make_array_from_callback(v.shape, sharding, lambda i, v=v: v[i]))
            for k, v in values.items()}


SHAPES = {"w": (8, 3), "b": (4,)}


@dist.launcher(n_gpus=2)
def save_over_processes(directory: str) -> dict:
    """Save tensors sharded over both processes, then load them back into fresh sharded
    tensors; report what each process saw (the `.numpy()` of such an array fails: no host
    has it all)."""
    state = _over_processes(SHAPES, offset=1.0)
    try:
        state["w"].numpy()
        gathered = "no error"
    except Exception as e:  # noqa: BLE001 (reported to the test)
        gathered = type(e).__name__
    save_checkpoint(directory, {"params": state, "rank": dist.get_rank()}, step=7)
    fresh = _over_processes(SHAPES, offset=-5.0)
    got = load_checkpoint(directory, {"params": fresh, "rank": -1})
    local = {k: [(str(s.index), np.asarray(s.data).tolist()) for s in eg.read(t)
                 .addressable_shards] for k, t in fresh.items()}
    return {"fully addressable": [eg.read(t).is_fully_addressable for t in state.values()],
            "numpy of a spread array": gathered, "rank saved": got["rank"],
            "local shards": local, "processes": jax.process_count()}


def main() -> None:
    case, directory = sys.argv[1], sys.argv[2]
    if case == "stall":
        print(f"orbax imported: {'orbax.checkpoint' in sys.modules}", flush=True)
        stall(directory)
        return
    json.dump(devices(directory), sys.stdout)


if __name__ == "__main__":
    main()
