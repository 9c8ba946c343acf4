"""The global-array style on 4 virtual CPU devices, in a fresh process (`global_check`), and on
2 processes of one device each (`workers.train_global`): every model, optimizer and mode against
one device on the whole batch; state stays replicated."""

from __future__ import annotations

import numpy as np
import pytest

import eager as eg
import eager.distributed as dist
from eager.core.errors import DistributedError

from ..helpers import computed_once, json_of_module
from . import training, workers

# Long runs (stateful machines over thousands of steps, launches of several processes): the
# README's test command leaves them out (-m "not slow"), .ci/run runs them too.
pytestmark = pytest.mark.slow

CASES = [f"{k}-{o}-{m}" for k in ("mlp", "cnn") for o in ("sgd", "adam")
         for m in ("eager", "partial_trace", "xla_trace")]


@pytest.fixture(scope="module")
def results(tmp_path_factory, worker_id) -> dict:
    return computed_once(tmp_path_factory, worker_id, "global_check", _results)


def _results() -> dict:
    return json_of_module("tests.distributed.global_check", timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_training_on_four_devices_equals_one_device(results, case):
    res = results[case]
    assert results["devices"] == 4
    assert res["error"] <= 1e-5, res
    assert res["state replicated"], "parameters, buffers or optimizer state left the mesh"
    assert res["loss on the mesh"]


def test_sync_batch_norm_on_a_sharded_batch_equals_batch_norm(results):
    assert results["sync_bn"] <= 1e-5


def test_a_batch_that_does_not_split_over_the_devices_is_refused(results):
    assert "6 entries, which do not split evenly over the 4 devices" in results["uneven batch"]


def test_one_device_mesh_in_this_process():
    # The suite's own process has one device: the same calls work, and bad batches are refused.
    m = dist.mesh()
    x = dist.shard_batch(np.ones((4, 2), np.float32), m)
    assert x.shape == (4, 2) and x.sharding.mesh.axis_names == ("data",)
    t = dist.replicate(eg.tensor([1.0, 2.0]), m)
    assert t.sharding.is_fully_replicated
    with pytest.raises(DistributedError, match="axis 3 is out of range"):
        dist.shard_batch(np.ones((4, 2), np.float32), m, axis=3)
    with pytest.raises(TypeError, match="replicate places"):
        dist.replicate(3.0)


@pytest.fixture(scope="module")
def across_processes(tmp_path_factory, worker_id) -> list:
    """Every case of the global-array style in one launch of 2 processes (one device each)."""
    return computed_once(tmp_path_factory, worker_id, "train_global",
                         lambda: workers.train_global(workers.TRAINING_CASES))


@pytest.mark.parametrize("kind, optimizer, mode", workers.TRAINING_CASES)
def test_training_across_two_processes_equals_one_process(across_processes, kind, optimizer,
                                                         mode):
    case = f"{kind}-{optimizer}-{mode}"
    want = across_processes[0]["references"][f"{kind}-{optimizer}"]
    for r, res in enumerate(across_processes):
        got = res["states"][case]
        assert training.max_error(got, want) <= 1e-5, f"rank {r}"
    for k, v in across_processes[0]["states"][case].items():
        np.testing.assert_array_equal(v, across_processes[1]["states"][case][k], err_msg=k)
