"""MegEngine's per-rank style on 2 processes over loopback (gloo): collectives against numpy,
training with SyncBatchNorm and an all-reduce callback against one process on the whole batch,
broadcast and rank-0 checkpoints, and the launcher's handling of failing workers."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

import eager as eg
import eager.distributed as dist
from eager.core.errors import DistributedError, WorkerError

from ..helpers import computed_once
from . import workers

# Long runs (stateful machines over thousands of steps, launches of several processes): the
# README's test command leaves them out (-m "not slow"), .ci/run runs them too.
pytestmark = pytest.mark.slow

WORLD = 2


def _data(r: int) -> np.ndarray:
    return workers.rank_data(r, (4, 3))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "partial_trace"])
def test_collectives_match_numpy_in_value_and_gradient(compiled):
    results = workers.collectives(compiled)
    assert [res["rank"] for res in results] == [0, 1]
    assert all(res["world"] == WORLD and res["distributed"] for res in results)
    sign = {"all_reduce_max": [1, -1], "all_reduce_min": [1, -1]}
    for name in ("all_reduce_sum", "all_reduce_max", "all_reduce_min", "all_gather",
                 "broadcast", "reduce_scatter_sum"):
        s = sign.get(name, [1, 1])
        xs = [_data(r) * s[r] for r in range(WORLD)]
        w = [float(r + 1) for r in range(WORLD)]  # rank r's loss is sum((r + 1) * out_r)
        want_y, want_g = _expected(name, xs, w)
        for r, res in enumerate(results):
            y, g = res[name]
            np.testing.assert_allclose(y, want_y[r], rtol=1e-6, err_msg=f"{name} rank {r}")
            np.testing.assert_allclose(g, want_g[r], rtol=1e-6, err_msg=f"{name} grad rank {r}")


def _expected(name: str, xs: list, w: list) -> tuple[list, list]:
    """Each rank's output and the gradient of the sum of all ranks' losses at its input."""
    total = sum(w)
    ones = [np.ones_like(x) for x in xs]
    if name == "all_reduce_sum":
        return [xs[0] + xs[1]] * 2, [total * o for o in ones]
    if name in ("all_reduce_max", "all_reduce_min"):
        pick = np.maximum if name.endswith("max") else np.minimum
        y = pick(xs[0], xs[1])
        return [y] * 2, [total * (x == y) for x in xs]
    if name == "all_gather":
        return [np.concatenate(xs)] * 2, [total * o for o in ones]
    if name == "broadcast":  # from rank 1
        return [xs[1]] * 2, [0 * ones[0], total * ones[1]]
    full = xs[0] + xs[1]  # reduce_scatter_sum: rank r gets rows [2r, 2r + 2)
    return [full[:2], full[2:]], [np.concatenate([w[0] * ones[0][:2], w[1] * ones[0][2:]])] * 2


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "partial_trace"])
def test_sync_observers_take_the_range_over_all_ranks(compiled):
    results = workers.sync_observers(compiled)
    batches = [[workers.rank_data(r, (2, 3)) * (i + 1) * (-1 if r else 1) for i in range(3)]
               for r in range(WORLD)]
    lows = [min(b[i].min() for b in batches) for i in range(3)]
    highs = [max(b[i].max() for b in batches) for i in range(3)]
    lo, hi = np.float32(lows[0]), np.float32(highs[0])
    for low, high in zip(lows[1:], highs[1:]):  # EMA, momentum 0.9
        lo, hi = lo * np.float32(0.9) + np.float32(0.1) * low, hi * np.float32(0.9) + \
            np.float32(0.1) * high
    for res in results:  # every rank the same
        np.testing.assert_allclose(res["minmax"], [min(lows), max(highs)], rtol=1e-6)
        np.testing.assert_allclose(res["ema"], [lo, hi], rtol=1e-6)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, worker_id) -> list:
    """Every training case in one launch (starting 2 processes costs seconds)."""
    return computed_once(tmp_path_factory, worker_id, "train_per_rank",
                         lambda: workers.train(workers.TRAINING_CASES))


@pytest.mark.parametrize("kind, optimizer, mode", workers.TRAINING_CASES)
def test_training_equals_one_process_on_the_whole_batch(trained, kind, optimizer, mode):
    case = f"{kind}-{optimizer}-{mode}"
    want = trained[0]["references"][f"{kind}-{optimizer}"]
    for r, res in enumerate(trained):
        for k, v in res["states"][case].items():
            np.testing.assert_allclose(v, want[k], rtol=1e-5, atol=1e-6, err_msg=f"rank {r} {k}")
    if mode.endswith("+gmcallback"):  # compiled: its Python ran once per parameter, capturing
        params = len(workers.training.build(kind).parameters())
        assert trained[0]["python_calls"][case] == params
    # SyncBatchNorm's running statistics (and everything else) are identical on both ranks.
    for k, v in trained[0]["states"][case].items():
        np.testing.assert_array_equal(v, trained[1]["states"][case][k], err_msg=k)


def test_bcast_list_and_a_checkpoint_saved_by_rank_0(tmp_path):
    path = tmp_path / "model.pkl"
    results = workers.broadcast_and_save(str(path))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    saved = eg.load(str(path))
    assert [np.asarray(v).tolist() for v in saved.values()] == [a.tolist() for a in results[0]]


@pytest.mark.parametrize("how", ["raise", "die"])
def test_a_failing_worker_raises_with_its_traceback_and_leaves_no_process(how):
    start = time.monotonic()
    with pytest.raises(WorkerError, match="rank 1") as info:
        workers.fails(how)
    assert time.monotonic() - start < 60
    if how == "raise":
        assert "rank 1 gave up on purpose" in str(info.value)
        assert "Traceback" in str(info.value)
    else:
        assert "exited with code 3" in str(info.value)
    import multiprocessing

    assert multiprocessing.active_children() == []


def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DistributedError, match=f"port {port}.*already in use"):
            dist.launcher(workers.pid.func, port=port)()


def test_the_launcher_returns_values_in_rank_order():
    pids = workers.pid()
    assert len(pids) == WORLD and len(set(pids)) == WORLD


def test_a_ranks_sampler_takes_the_group_and_a_disjoint_shard():
    results = workers.rank_batches()
    assert [res["sampler"] for res in results] == [(2, 0), (2, 1)]
    shards = [[i for batch in res["batches"] for i in batch] for res in results]
    assert [len(s) for s in shards] == [12, 12]  # 23 padded to 24 with the epoch's first index
    assert sorted(set(shards[0]) | set(shards[1])) == list(range(23))
    assert len(set(shards[0]) & set(shards[1])) <= 1
