"""Compiles on the compile pool (`xla_segments/compile_pool.py`): its size, a segment's
training forward and backward compiled at once (`Segment.vjp`) with results bit-identical to
serial compiles, a failed background compile raised at first use and then compiled again, a
backward lowered for placements the forward did not give recompiled, and a forked child's own
pool."""

import multiprocessing
import os
import subprocess
import sys
import threading
import traceback
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import trained_with_threads
from xla_segments import CompileOptions, Segment, compile_pool, segment_store, store
from xla_segments import segment as segment_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, expected", [("1", 1), ("3", 3), (" 2 ", 2), ("", None)])
def test_the_pool_is_sized_by_the_environment_or_the_cpus(threads, value, expected):
    threads(value)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert compile_pool.threads() == (expected or cpus)
    assert compile_pool.parallel() == (compile_pool.threads() > 1)


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_size_that_is_not_a_positive_int_is_refused_naming_the_variable(threads, value):
    threads(value)
    with pytest.raises(ValueError, match=compile_pool.ENV):
        compile_pool.threads()


def on_pool(job):
    """What `job()` returns, run by a pool thread (waited for, not taken over)."""
    finished = threading.Event()

    def run():
        try:
            return job()
        finally:
            finished.set()

    task = compile_pool.Task(run)
    assert finished.wait(timeout=60)
    return task.result()


def thread_name():
    return threading.current_thread().name


def test_a_task_runs_on_the_pool_or_in_the_thread_that_needs_it_first(threads):
    threads(2)
    assert on_pool(thread_name).startswith("partial-compile")
    release = threading.Event()
    busy = [compile_pool.Task(release.wait) for _ in range(2)]  # both pool threads wait
    queued = compile_pool.Task(thread_name)
    assert queued.result() == thread_name()  # not left waiting behind them
    release.set()
    assert [t.result() for t in busy] == [True, True]


def test_a_task_started_ahead_waits_until_no_compile_is_needed_now(threads):
    threads(2)
    ran = threading.Event()
    with compile_pool.needed_now():
        ahead = compile_pool.Task(lambda: (ran.set(), thread_name())[1], ahead=True)
        assert not ran.wait(0.3)  # (were it to start, it would have)
    assert ran.wait(60)
    assert ahead.result().startswith("partial-compile-ahead")


def test_a_thread_that_needs_a_task_started_ahead_runs_it_itself(threads):
    threads(2)
    held, release = threading.Event(), threading.Event()

    def hold():
        with compile_pool.needed_now():
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        assert compile_pool.Task(thread_name, ahead=True).result() == thread_name()
    finally:
        release.set()
        holder.join()


def test_compiles_started_ahead_do_not_hold_each_other_back(threads):
    """A compile on the thread of compiles started ahead is not one needed now: the next one
    queued there starts after it, and nothing is left counted."""
    threads(2)

    def job():
        with compile_pool.needed_now():
            return thread_name()

    tasks = [compile_pool.Task(job, ahead=True) for _ in range(3)]
    assert all(t.result() for t in tasks)
    assert compile_pool._needed[0] == 0


def test_a_segments_forward_compile_is_needed_now_and_its_backward_waits(threads, monkeypatch):
    """The backward's compile, started ahead, starts once the forward's is done."""
    threads(2)
    order = []
    real = segment_module._Lowering.compile

    def noted(self):
        order.append((self.kind, "start", compile_pool._needed[0]))
        try:
            return real(self)
        finally:
            order.append((self.kind, "end"))

    monkeypatch.setattr(segment_module._Lowering, "compile", noted)
    x, w1, w2 = jnp.ones((4, 3)), jnp.full((3, 5), 0.2), jnp.full((5, 2), 0.3)
    fwd, bwd = Segment(_mlp, [x, w1, w2]).vjp((1, 2), (0, 1))
    (out, reg), res = fwd(x, w1, w2)
    bwd(res, (jnp.ones_like(out), jnp.ones(())))
    kinds = [(k, what) for k, what, *_ in order]
    assert kinds.index(("backward", "start")) > kinds.index(("forward_vjp", "end"))


def _mlp(x, w1, w2):
    h = jnp.tanh(x @ w1)
    return jax.nn.log_softmax(h @ w2), (h * h).mean()


def test_a_segment_compiles_forward_and_backward_on_the_pool(threads, monkeypatch):
    threads(2)
    where = []
    real = segment_module._Lowering.compile

    def noted(self):
        where.append((self.kind, threading.current_thread().name))
        return real(self)

    monkeypatch.setattr(segment_module._Lowering, "compile", noted)
    x, w1, w2 = jnp.ones((4, 3)), jnp.full((3, 5), 0.1), jnp.full((5, 2), 0.2)
    fwd, bwd = Segment(_mlp, [x, w1, w2]).vjp((1, 2), (0, 1))
    (out, reg), res = fwd(x, w1, w2)
    grads = bwd(res, (jnp.ones_like(out), jnp.ones(())))
    want = jax.vjp(lambda a, b: _mlp(x, a, b), w1, w2)[1]((jnp.ones_like(out), jnp.ones(())))
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert sorted(kind for kind, _ in where) == ["backward", "forward_vjp"]
    assert fwd.seconds > 0 and bwd.seconds > 0


class BoomError(RuntimeError):
    """A compile error of the test's own."""


def _failing_backward(real):
    def compile(self):
        if self.kind == "backward":
            raise BoomError("the backward does not compile")
        return real(self)

    return compile


def test_a_failed_backward_compile_is_raised_when_the_backward_runs_then_compiled_again(
        threads, monkeypatch):
    threads(2)
    real = segment_module._Lowering.compile
    monkeypatch.setattr(segment_module._Lowering, "compile", _failing_backward(real))
    x, w1, w2 = jnp.ones((4, 3)), jnp.full((3, 5), 0.1), jnp.full((5, 2), 0.2)
    seg = Segment(_mlp, [x, w1, w2])
    fwd, bwd = seg.vjp((1,), (0,))  # the forward is fine: no error yet
    out, res = fwd(x, w1, w2)
    cts = (jnp.ones_like(out[0]),)
    for _ in range(2):  # raised at the first use, and again by the compile the next use retries
        with pytest.raises(BoomError) as raised:
            bwd(res, cts)
        assert "compile" in [f.name for f in traceback.extract_tb(raised.value.__traceback__)]
    assert seg.vjp((1,), (0,)) == (fwd, bwd)  # not half-built: the same pair
    monkeypatch.setattr(segment_module._Lowering, "compile", real)
    want = jax.vjp(lambda a: _mlp(x, a, w2)[0], w1)[1](cts[0])
    np.testing.assert_allclose(bwd(res, cts)[0], want[0], rtol=1e-6)


def test_an_xla_error_in_the_backward_keeps_its_type(threads):
    threads(2)
    options = CompileOptions(executable_options={"backward": {"xla_no_such_option": True}})
    x, w1, w2 = jnp.ones((4, 3)), jnp.full((3, 5), 0.1), jnp.full((5, 2), 0.2)
    fwd, bwd = Segment(_mlp, [x, w1, w2], options=options).vjp((1,), (0,))
    out, res = fwd(x, w1, w2)
    with pytest.raises(Exception, match="xla_no_such_option") as first:
        bwd(res, (out[0],))
    with pytest.raises(type(first.value), match="xla_no_such_option"):
        bwd(res, (out[0],))
    # serially, the same error, of the same type, when the pair is built
    threads(1)
    with pytest.raises(type(first.value), match="xla_no_such_option"):
        Segment(_mlp, [x, w1, w2], options=options).vjp((1,), (0,))


def test_a_segment_compiled_on_the_pool_is_kept_and_loads_in_a_new_segment(
        threads, tmp_path, monkeypatch):
    threads(2)
    monkeypatch.setattr(store, "folder", lambda name: str(tmp_path / name))
    args = [jnp.ones((4, 3)), jnp.full((3, 5), 0.1), jnp.full((5, 2), 0.2)]

    def train():
        seg = Segment(_mlp, args, store=segment_store.SegmentStore("mlp"))
        fwd, bwd = seg.vjp((1,), (0,))
        out, res = fwd(*args)
        return bwd(res, (jnp.ones_like(out[0]),))[0]

    first = train()
    assert len(list((tmp_path / "segments").iterdir())) == 2  # training forward, backward
    np.testing.assert_array_equal(train(), first)


def test_a_pool_thread_keeps_nothing_compiled_under_other_jax_settings(threads, tmp_path,
                                                                        monkeypatch):
    """jax's settings (x64 here) are per thread and part of a store's key: a pool thread,
    with the default settings, must not keep what was lowered under the caller's. (Were the
    caller to run a compile itself, because no pool thread had started it yet, it would keep
    it, rightly, under its own settings: each compile is waited for on the pool here.)"""
    threads(2)
    monkeypatch.setattr(store, "folder", lambda name: str(tmp_path / name))
    ran_by: list[str] = []

    class OnPool(compile_pool.Task):
        def __init__(self, job, ahead=False):
            finished = threading.Event()

            def run():
                ran_by.append(thread_name())
                try:
                    return job()
                finally:
                    finished.set()

            super().__init__(run, ahead)
            assert finished.wait(timeout=60)

    monkeypatch.setattr(compile_pool, "Task", OnPool)
    with jax.enable_x64(True):
        x = jnp.ones((3,), jnp.float64)
        seg = Segment(lambda v: (jnp.sin(v) * 2,), [x], store=segment_store.SegmentStore("x64"))
        fwd, bwd = seg.vjp((0,), (0,))
        out, res = fwd(x)
        (grad,) = bwd(res, (jnp.ones_like(out[0]),))
    assert grad.dtype == jnp.float64
    np.testing.assert_allclose(grad, 2 * np.cos(1.0), rtol=1e-12)
    assert len(ran_by) == 2 and all(name.startswith("partial-compile") for name in ran_by)
    assert not (tmp_path / "segments").exists()


def test_the_pool_counts_jax_cache_hits_from_the_callers_count(threads):
    """`SegmentStore.save` keeps only an executable compiled anew: a load from jax's own cache
    in the pool thread (`store.jax_hits`, counted per thread) must show there."""
    threads(2)
    before = store.jax_hits.count
    assert on_pool(lambda: store.jax_hits.count) == before

    def hit():
        store.jax_hits.on_event("/jax/compilation_cache/cache_hits")  # what jax's load sends
        return store.jax_hits.count

    assert on_pool(hit) == before + 1
    assert store.jax_hits.count == before  # the caller's own count is its own
    assert compile_pool.Task(hit).result() == before + 1


def test_a_backward_lowered_for_the_wrong_device_is_lowered_again():
    """The backward is lowered for where the forward's outputs are predicted to land, before the
    forward compiled; a wrong prediction (here forced, on two devices) is found at the first
    use, and the backward compiled again for where they are."""
    script = """
import jax, jax.numpy as jnp, numpy as np
from xla_segments import Segment
from xla_segments import segment as S
S.Segment._device = lambda self: jax.devices()[0]  # wrong: the inputs are on device 1
x = jax.device_put(jnp.ones((4, 3)), jax.devices()[1])
w = jax.device_put(jnp.full((3, 2), 0.5), jax.devices()[1])
fwd, bwd = Segment(lambda x, w: (jnp.tanh(x @ w),), [x, w]).vjp((1,), (0,))
out, res = fwd(x, w)
(g,) = bwd(res, (jnp.ones_like(out[0]),))
want = jax.vjp(lambda w: jnp.tanh(x @ w), w)[1](jnp.ones((4, 2)))[0]
np.testing.assert_allclose(g, want, rtol=1e-6)
assert g.devices() == {jax.devices()[1]}, g.devices()
"""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PARTIAL_COMPILE_THREADS="2", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


_TRAINING = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from xla_segments import CompileOptions, Segment, compile_threads

def net(x, w1, b1, w2):
    h = jax.nn.relu(jax.lax.conv_general_dilated(x, w1, (1, 1), "SAME") + b1)
    return jax.nn.log_softmax(h.mean(axis=(2, 3)) @ w2), (w1 * w1).sum()

rng = np.random.default_rng(0)
params = [jnp.asarray(rng.standard_normal(s).astype(np.float32) * 0.3)
          for s in [(8, 3, 3, 3), (1, 8, 1, 1), (8, 5)]]
x = jnp.asarray(rng.standard_normal((4, 3, 10, 10)).astype(np.float32))
seen = {}
for step in range(3):
    seg = Segment(net, [x, *params], options=CompileOptions(remat=step == 2))
    fwd, bwd = seg.vjp((1, 2, 3), (0, 1))
    (logp, reg), res = fwd(x, *params)
    grads = bwd(res, (-jnp.ones_like(logp) / logp.size, jnp.full((), 1e-3)))
    seen[f"logp{step}"], seen[f"reg{step}"] = logp, reg
    for i, g in enumerate(grads):
        seen[f"grad{step}_{i}"] = g
    params = [p - 0.5 * g for p, g in zip(params, grads)]
seen.update({f"param{i}": p for i, p in enumerate(params)})
np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in seen.items()})
print(json.dumps({"threads": compile_threads()}))
"""


def test_training_is_bit_identical_compiled_serially_or_on_the_pool(tmp_path):
    """Values, gradients and parameters after three steps (each its own segment: new
    compiles, remat in the last), with one compile thread and with three, in new processes."""
    results = {n: trained_with_threads(_TRAINING, tmp_path / f"threads{n}.npz", n, 300)
               for n in ("1", "3")}
    serial, pooled = results["1"], results["3"]
    assert serial.keys() == pooled.keys() and len(serial) == 3 * 5 + 3
    for name in serial:
        assert np.array_equal(serial[name], pooled[name]), name


def test_a_forked_child_gets_a_pool_of_its_own(threads):
    """The pool's threads are not copied by a fork: a child that reused the parent's pool
    would wait forever; a task a parent's thread was running is run again by the child. A
    compile the parent needed now when it forked holds back nothing in the child."""
    threads(2)
    release = threading.Event()
    running = threading.Event()
    parent = os.getpid()

    def job():
        if os.getpid() == parent:
            running.set()
            release.wait()
        return os.getpid()

    started = compile_pool.Task(job)
    running.wait(timeout=30)
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_in_child, args=(started,))
    with warnings.catch_warnings(), compile_pool.needed_now():  # jax (and Python 3.12+) warn
        warnings.simplefilter("ignore", RuntimeWarning)  # of fork; the child runs no jax
        warnings.simplefilter("ignore", DeprecationWarning)
        child.start()
    child.join(timeout=60)
    release.set()
    assert child.exitcode == 0
    assert started.result() == parent


def _in_child(started):
    ok = started.result() == os.getpid()  # the parent's thread is not here: the child runs it
    ok = ok and on_pool(thread_name).startswith("partial-compile")
    ran = threading.Event()
    ahead = compile_pool.Task(lambda: (ran.set(), thread_name())[1], ahead=True)
    ok = ok and ran.wait(30) and ahead.result().startswith("partial-compile-ahead")
    raise SystemExit(0 if ok else 1)


def test_a_pool_thread_has_the_callers_settings_unless_the_caller_changed_them(threads):
    """What decides whether a pool thread may keep an executable: jax's settings as a store
    keys them (an axis environment object of each thread's own is not a difference)."""
    threads(2)
    assert on_pool(segment_module._context) == segment_module._context()
    with jax.enable_x64(True):
        assert on_pool(segment_module._context) != segment_module._context()
