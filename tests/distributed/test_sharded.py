"""`dist.shard_params` (ZeRO / FSDP in the global-array style): training with parameters and
optimizer state split over 4 virtual devices (`sharded_check`, a fresh process) and over 2
processes (`workers.train_sharded`) equals one device on the whole batch, in every mode, and
every tensor keeps the layout it was given; the API's checks in this process (one device)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import eager as eg
import eager.distributed as dist
import eager.module as M
import eager.optimizer as optim
from eager.core.errors import DistributedError

from ..helpers import computed_once, json_of_module
from . import sharded_check, training, workers

CASES = [f"{k}-{o}-{m}-{s}" for k in sharded_check.KINDS for o in sharded_check.OPTIMIZERS
         for m in sharded_check.MODES for s in sharded_check.STAGES] + [
             f"{k}-sgd-partial_trace+head-3-whole" for k in sharded_check.KINDS]
ACROSS = [("gpt", "adam", m, 3) for m in ("eager", "partial_trace+head", "xla_trace")] + [
    ("mlp", "sgd", "xla_trace", 1), ("cnn", "adam", "partial_trace+head", 3),
    ("cnn", "sgd", "eager", 1), ("gpt", "sgd", "partial_trace+head", 2)]


@pytest.fixture(scope="module")
def results(tmp_path_factory, worker_id) -> dict:
    return computed_once(tmp_path_factory, worker_id, "sharded_check", _results)


def _results() -> dict:
    return json_of_module("tests.distributed.sharded_check", timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_sharded_training_on_four_devices_equals_one_device(results, case):
    res = results[case]
    assert results["devices"] == 4
    assert res["error"] <= 1e-5, res
    assert res["moved"] == [], f"tensors that left the layout they were given: {res['moved']}"
    assert res["split"] > 0, "nothing was split over the devices"
    if case.endswith("-2"):
        assert res["grads unlike state"] == 0, "stage 2 left gradients whole"
    if case.endswith("-partial_trace-3"):  # the whole model is one segment: its backward
        # returns each split parameter's gradient split as the parameter (left to itself, XLA
        # returned one of the GPT's whole)
        assert res["grads unlike state"] == 0, "the segment's backward left gradients whole"


@pytest.fixture(scope="module")
def across_processes(tmp_path_factory, worker_id) -> list:
    return computed_once(tmp_path_factory, worker_id, "train_sharded",
                         lambda: workers.train_sharded(ACROSS))


@pytest.mark.slow
@pytest.mark.parametrize("kind, optimizer, mode, stage", ACROSS)
def test_sharded_training_across_two_processes_equals_one_device(across_processes, kind,
                                                                 optimizer, mode, stage):
    case = f"{kind}-{optimizer}-{mode}-{stage}"
    want = across_processes[0]["references"][f"{kind}-{optimizer}"]
    for r, res in enumerate(across_processes):
        assert res["spread"][case], f"rank {r}: no array was split over both processes"
        assert training.max_error(res["states"][case], want) <= 1e-5, f"rank {r}"


# ----- in this process (one device) ---------------------------------------------------------
def _model() -> tuple[M.Module, optim.Optimizer]:
    net = M.Sequential(M.Linear(64, 32), M.BatchNorm1d(32), M.Linear(32, 4))
    return net, optim.Adam(net.parameters(), lr=1e-3)


def test_shard_params_places_everything_on_the_mesh_and_returns_its_argument():
    net, opt = _model()
    mesh = dist.mesh()
    assert dist.shard_params([net, opt], mesh, min_size=64) == [net, opt]
    for t in list(net.parameters()) + list(net.buffers()) + [
            s for slots in opt.state.values() for s in slots.values()]:
        assert isinstance(t.sharding, NamedSharding) and t.sharding.mesh == mesh
    # (32, 64): split along the largest dimension
    assert net[0].weight.sharding.spec == PartitionSpec(None, "data")
    assert net[0].bias.sharding.spec == PartitionSpec()  # 32 elements < min_size
    assert net[1].running_mean.sharding.spec == PartitionSpec()  # buffers stay replicated
    assert opt.state[net[0].weight]["exp_avg"].sharding.spec == PartitionSpec(None, "data")
    assert opt.state[net[0].weight]["step"].sharding.spec == PartitionSpec()


def test_stage_one_splits_the_state_and_leaves_parameters_replicated():
    net, opt = _model()
    dist.shard_params([net, opt], stage=1, min_size=64)
    assert net[0].weight.sharding.spec == PartitionSpec()
    assert opt.state[net[0].weight]["exp_avg"].sharding.spec == PartitionSpec(None, "data")


def test_stage_two_lays_gradients_out_as_the_state_and_replicate_undoes_it():
    from eager.autodiff import GradManager
    from eager.core.device import grad_layout

    net, opt = _model()
    dist.shard_params([net, opt], stage=2, min_size=64)
    w = net[0].weight
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward(net(eg.ones((4, 64))).sum())
    assert w.sharding.spec == PartitionSpec()
    assert grad_layout(w).spec == PartitionSpec(None, "data")  # (4 devices: sharded_check)
    assert w.grad.sharding.is_equivalent_to(opt.state[w]["exp_avg"].sharding, 2)
    dist.replicate([net, opt])
    assert grad_layout(w) is None


def test_a_layout_named_per_parameter_wins_over_the_rule():
    net, opt = _model()
    dist.shard_params([net, opt], specs={"2.weight": PartitionSpec(None, "data")})
    assert net[2].weight.sharding.spec == PartitionSpec(None, "data")
    assert opt.state[net[2].weight]["exp_avg_sq"].sharding.spec == PartitionSpec(None, "data")
    dist.shard_params(net, specs=lambda name, t: PartitionSpec() if name == "0.weight" else None)
    assert net[0].weight.sharding.spec == PartitionSpec()


def test_bad_arguments_are_refused_with_what_to_do():
    net, _ = _model()
    with pytest.raises(DistributedError, match="stage must be 1 .*, 2 .* or 3"):
        dist.shard_params(net, stage=4)
    with pytest.raises(DistributedError, match="mesh axes are \\('data',\\), not 'model'"):
        dist.shard_params(net, axis="model")
    with pytest.raises(DistributedError, match="parameter '0.weight' of shape \\(32, 64\\)"):
        dist.shard_params(net, specs={"0.weight": PartitionSpec(None, None, "data")})
    with pytest.raises(TypeError, match="shard_params places a Module, an Optimizer"):
        dist.shard_params(eg.ones((4,)))


def test_a_tensor_keeps_its_layout_through_rebind_unless_told_otherwise():
    mesh = dist.mesh()
    t = dist.shard_params(M.Linear(64, 32), mesh, min_size=1).weight
    layout = t.sharding
    eg.rebind(t, eg.read(t) * 2)  # computed on one device: moved back onto the mesh
    assert t.sharding == layout
    single = jax.device_put(np.zeros(t.shape, np.float32), jax.devices()[0])
    eg.rebind(t, single, relayout=True)
    assert t.sharding == single.sharding


def test_a_gradient_layout_goes_with_its_tensor():
    import gc

    from eager.core import device

    t = eg.ones((8,))
    device.set_grad_layout(t, dist.replicate(eg.ones((8,))).sharding)
    assert device.grad_layout(t) is not None and device.grad_layout(eg.ones((8,))) is None
    key = id(t)
    del t
    gc.collect()
    assert key not in device._GRAD_LAYOUTS
