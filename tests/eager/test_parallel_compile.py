"""Eager ops' backward programs started on the compile pool when a call is recorded
(`registry.start_vjp`, `Persistent.prefetch`), and training bit-identical whether programs
compile serially (`PARTIAL_COMPILE_THREADS=1`) or on the pool, eager and compiled alike."""

import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
from eager.autodiff import GradManager
from eager.core.ops import Op
from eager.core.ops import persistent as P
from tests.helpers import trained_with_threads
from xla_segments import kept

ROOT = Path(__file__).resolve().parents[2]


def fresh_op() -> Op:
    """A new op object, as a new process has: nothing compiled, nothing loaded."""
    op = Op("test_parallel_axpy", lambda x, y, *, a: a * x * jnp.sin(y))
    op.persist = ("test_parallel_axpy",)
    return op


def _record(op, x, y):
    """Run `op` under a recording GradManager; return its vjp program and the manager."""
    gm = GradManager().attach([x])
    gm.__enter__()
    out = eg.apply(op, x, y, a=3.0)
    return op._bwd[((("a", 3.0),), (0,))], gm, out


def test_a_recorded_calls_backward_is_compiled_meanwhile_and_used(cache, threads):
    threads(2)
    x, y = eg.Parameter(np.linspace(-1, 1, 5, dtype=np.float32)), eg.tensor(np.ones(5, np.float32))
    vjp, gm, out = _record(fresh_op(), x, y)
    assert isinstance(vjp, P.Persistent) and len(vjp.started) == 1
    (task,) = vjp.started.values()
    gm.backward(out.sum())
    gm.__exit__(None, None, None)
    assert not vjp.started and len(vjp.loaded) == 1  # waited for, then used
    assert vjp.loaded[next(iter(vjp.loaded))] is task.result()
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.sin(1.0), rtol=1e-6)


def test_one_compile_thread_starts_nothing(cache, threads):
    threads(1)
    x, y = eg.Parameter(np.ones(3, np.float32)), eg.tensor(np.ones(3, np.float32))
    vjp, gm, out = _record(fresh_op(), x, y)
    assert vjp.started is None
    gm.backward(out.sum())
    gm.__exit__(None, None, None)
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.sin(1.0), rtol=1e-6)


def test_a_compile_that_fails_on_the_pool_is_done_again_by_the_backward(cache, threads,
                                                                        monkeypatch):
    threads(2)
    real = kept.Persistent._compiled
    caller = threading.current_thread()

    def failing_elsewhere(self, *args):
        if threading.current_thread() is not caller:
            raise RuntimeError("no compile on the pool")
        return real(self, *args)

    monkeypatch.setattr(kept.Persistent, "_compiled", failing_elsewhere)
    x, y = eg.Parameter(np.ones(4, np.float32)), eg.tensor(np.ones(4, np.float32))
    vjp, gm, out = _record(fresh_op(), x, y)
    gm.backward(out.sum())
    gm.__exit__(None, None, None)
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.sin(1.0), rtol=1e-6)


def test_a_backward_is_lowered_under_the_recording_threads_jax_settings(cache, threads):
    """x64 is set per thread: the program is lowered where the call is recorded, and only
    compiled on the pool."""
    threads(2)
    with jax.enable_x64(True):
        x = eg.Parameter(np.linspace(-1, 1, 3))
        y = eg.tensor(np.ones(3))
        vjp, gm, out = _record(fresh_op(), x, y)
        (task,) = vjp.started.values()
        gm.backward(out.sum())
        gm.__exit__(None, None, None)
        assert task.result() is vjp.loaded[next(iter(vjp.loaded))]
        assert x.grad.numpy().dtype == np.float64
        np.testing.assert_allclose(x.grad.numpy(), 3.0 * np.sin(1.0), rtol=1e-12)


def test_a_backward_that_does_not_lower_raises_when_the_backward_runs(cache, threads):
    """An op whose forward runs but whose gradient jax cannot take: the error is the
    backward's, raised there as with serial compiles, not at the call being recorded."""
    threads(2)
    op = Op("test_parallel_no_vjp", lambda x: jax.pure_callback(
        np.sin, jax.ShapeDtypeStruct((3,), np.float32), x))
    op.persist = ("test_parallel_no_vjp",)
    x = eg.Parameter(np.ones(3, np.float32))
    with GradManager().attach([x]) as gm:
        out = eg.apply(op, x)  # recorded: no error yet
        with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
            gm.backward(out.sum())


_TRAINING = """
import json, sys
import numpy as np
import eager as eg
import eager.functional as F
import eager.module as M
import partial
from eager.autodiff import GradManager
from xla_segments import compile_threads


class Net(M.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = M.Conv2d(3, 8, 3, padding=1), M.BatchNorm2d(8)
        self.c2, self.b2 = M.Conv2d(8, 8, 3, stride=2, padding=1), M.BatchNorm2d(8)
        self.fc = M.Linear(8, 5)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x))) + x[:, :, ::2, ::2]
        return self.fc(x.mean(axis=(2, 3)))


eg.random.seed(0)
eager_net, body, head = Net(), Net(), M.Linear(5, 5)
params = eager_net.parameters() + body.parameters() + head.parameters()
gm = GradManager().attach(params)
opt = eg.optimizer.SGD(params, lr=0.1, momentum=0.9)
compiled = partial.partial_trace(body)
rng = np.random.default_rng(0)
seen = {}
for step in range(3):
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 4).astype(np.int32)
    with gm:
        eager_logits = eager_net(eg.tensor(x))
        logits = head(compiled(eg.tensor(x)))
        loss = F.cross_entropy(eager_logits, eg.tensor(y)) + F.cross_entropy(logits, eg.tensor(y))
        gm.backward(loss)
    seen[f"loss{step}"] = loss.numpy()
    seen[f"logits{step}"] = np.concatenate([eager_logits.numpy(), logits.numpy()])
    for i, p in enumerate(params):
        seen[f"grad{step}_{i}"] = p.grad.numpy()
    opt.step().clear_grad()
for i, p in enumerate(params):
    seen[f"param{i}"] = p.numpy()
for i, (name, b) in enumerate([*eager_net.named_buffers(), *body.named_buffers()]):
    seen[f"buffer{i}"] = b.numpy()
np.savez(sys.argv[1], **seen)
print(json.dumps({"threads": compile_threads()}))
"""


def test_training_is_bit_identical_compiled_serially_or_on_the_pool(tmp_path):
    """An eager CNN and a compiled region (a segment) trained together for three steps, in new
    processes with empty caches: losses, outputs, gradients, parameters and BatchNorm
    statistics with one compile thread and with two are the same bits."""
    results = {n: trained_with_threads(_TRAINING, tmp_path / f"threads{n}.npz", n, 600,
                                       PARTIAL_CACHE_DIR=str(tmp_path / f"cache{n}"))
               for n in ("1", "2")}
    serial, pooled = results["1"], results["2"]
    assert serial.keys() == pooled.keys() and len(serial) > 20
    for name in serial:
        assert np.array_equal(serial[name], pooled[name]), name
