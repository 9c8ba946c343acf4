"""Threads: capture state and GradManager recording state belong to the thread that set them, and
several threads calling one compiled function get what serial calls give.

The interleavings that matter are forced with events and barriers rather than left to the
scheduler: a region's Python body runs only while it is being captured, so a body that waits on
an event holds its capture open while another thread runs. Every wait has a timeout and every
join is bounded, so a deadlock fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
from tests.helpers import randn_array, training_step

from .differential import assert_all_close

# Generous: a wait covers at most a few compilations. Only a deadlock comes near it.
TIMEOUT = 60.0


def _labels(n, classes, seed=0):
    return np.random.default_rng([seed, 1]).integers(0, classes, n).astype(np.int32)


def _run_threads(targets: list[Callable[[], None]], *, barrier: threading.Barrier | None = None,
                 events: tuple[threading.Event, ...] = ()) -> None:
    """Run each target in its own thread; re-raise the first failure with its traceback.

    A failing thread breaks `barrier` and sets `events`, so the others stop waiting for it
    instead of running into their timeouts; joins are bounded, and threads are daemons, so a
    deadlock fails the test and never hangs the run."""
    errors: list[tuple[str, BaseException, str]] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001  (reported to the test below)
                errors.append((threading.current_thread().name, e, traceback.format_exc()))
                if barrier is not None:
                    barrier.abort()
                for event in events:
                    event.set()
        return run

    threads = [threading.Thread(target=guarded(fn), name=f"worker{i}", daemon=True)
               for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2 * TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:  # let them fail out of their waits rather than linger
        if barrier is not None:
            barrier.abort()
        for event in events:
            event.set()
    if errors:  # the first error is the cause; later ones are usually broken barriers
        name, error, tb = errors[0]
        raise AssertionError(f"{name} raised {type(error).__name__}: {error}\n{tb}") from error
    assert not alive, f"threads still running after {2 * TIMEOUT:.0f} s: {alive}"


def _wait(event: threading.Event, what: str) -> None:
    if not event.wait(TIMEOUT):
        raise TimeoutError(f"timed out waiting for {what}")


def _state(net: M.Module, opt: optim.Optimizer | None = None) -> dict[str, np.ndarray]:
    """Parameters, buffers and optimizer state, by name, as numpy arrays."""
    state = dict(net.state_dict())
    if opt is not None:
        for j, s in enumerate(opt.state.values()):
            for k, t in s.items():
                state[f"optimizer.param{j}.{k}"] = t.numpy()
    return state


def _assert_states_close(got: dict, want: dict, what: str, tol: float = 2e-5) -> None:
    assert got.keys() == want.keys(), what
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=f"{what}: {k}")


def _mlp(seed: int) -> M.Module:
    """A small model with a BatchNorm (buffers the step writes), initialised from `seed`."""
    net = M.Sequential(M.Linear(6, 12), M.BatchNorm1d(12), M.ReLU(), M.Linear(12, 3))
    # From numpy, not the framework's generator: the reference and the threaded run build the
    # same models whatever the generator's state.
    rng = np.random.default_rng([seed, 2])
    params = {k: (rng.standard_normal(p.shape) * 0.4 + (k == "1.weight")).astype(np.float32)
              for k, p in net.named_parameters()}
    net.load_state_dict(params, strict=False)  # BatchNorm statistics stay 0 and 1
    return net


# ----- capture state is per thread -------------------------------------------------------------
def _eager_work() -> tuple[dict, tuple]:
    """A small eager training step on tensors of its own: creation, arithmetic, an in-place
    update, a GradManager, an optimizer and value reads. Returns its results and tensors."""
    w = eg.Parameter(np.array([[0.5, -1.0], [2.0, 0.25], [1.0, 1.5]], np.float32))
    data = eg.tensor(randn_array(4, 3, seed=5))
    counter = eg.zeros(2)
    gm = GradManager().attach([w])
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    with gm:
        loss = ((data @ w) ** 2).mean()
        gm.backward(loss)
    grad = w.grad.numpy()
    opt.step().clear_grad()
    counter[...] = counter + 1
    out = {"loss": loss.item(), "grad": grad, "w": w.numpy(), "counter": counter.numpy(),
           "positive": bool((w > 0).sum() > 2)}
    return out, (w, counter)


def test_eager_code_in_another_thread_runs_normally_while_a_region_is_captured():
    net = M.Linear(3, 2)
    x = eg.tensor(randn_array(4, 3))
    want_a = (net(x) * 2).numpy()
    want_b, _ = _eager_work()  # the same work, alone
    inside, resume = threading.Event(), threading.Event()

    @partial_trace
    def region(x):
        h = net(x) * 2
        inside.set()  # Python in the body runs at capture time: hold the capture open
        _wait(resume, "the eager thread")
        return h

    results: dict = {}

    def capturing_thread():
        results["a"] = region(x).numpy()

    def eager_thread():
        _wait(inside, "the capture to start")
        try:
            results["b"], results["b_tensors"] = _eager_work()
        finally:
            resume.set()

    _run_threads([capturing_thread, eager_thread], events=(inside, resume))
    np.testing.assert_allclose(results["a"], want_a, rtol=1e-6)
    for k, v in want_b.items():
        np.testing.assert_allclose(results["b"][k], v, rtol=1e-6, err_msg=k)
    # The region's later calls (served by its entry) leave the other thread's tensors alone.
    w, counter = results["b_tensors"]
    for _ in range(3):
        np.testing.assert_allclose(region(x).numpy(), want_a, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), want_b["w"], rtol=1e-6)
    np.testing.assert_array_equal(counter.numpy(), want_b["counter"])
    assert region.cache_info().captures == 1


def test_another_threads_writes_during_a_capture_do_not_become_outputs_of_the_region():
    # Only writes in the other thread (no value reads), so that what is checked is where the
    # writes go, not whether a read there is refused.
    scale = eg.tensor([2.0, 3.0])
    counter = eg.zeros(2)
    inside, resume = threading.Event(), threading.Event()

    @partial_trace
    def region(x):
        y = x * scale
        inside.set()
        _wait(resume, "the writing thread")
        return y

    out = {}

    def capturing_thread():
        out["y"] = region(eg.ones(2)).numpy()

    def writing_thread():
        _wait(inside, "the capture to start")
        try:
            counter[...] = counter + 1
            counter[0] = counter[0] + 10
        finally:
            resume.set()

    _run_threads([capturing_thread, writing_thread], events=(inside, resume))
    np.testing.assert_array_equal(out["y"], [2.0, 3.0])
    np.testing.assert_array_equal(counter.numpy(), [11.0, 1.0])
    counter[...] = counter * 2  # the main thread moves it on; the region must not reset it
    for _ in range(3):
        np.testing.assert_array_equal(region(eg.ones(2)).numpy(), [2.0, 3.0])
        np.testing.assert_array_equal(counter.numpy(), [22.0, 2.0])
    assert region.cache_info().captures == 1


# ----- GradManager recording state is per thread -----------------------------------------------
def _quadratic(x_np, w_np):
    """loss = sum((x @ w)^2) and its gradient 2 x^T (x w), in numpy."""
    return 2 * x_np.T @ (x_np @ w_np)


def test_grad_managers_recording_in_several_threads_at_once_each_get_their_gradients():
    n, rounds = 4, 3
    xs = [randn_array(5, 3, seed=k) for k in range(n)]
    w0 = [randn_array(3, 2, seed=10 + k) for k in range(n)]
    ws = [eg.Parameter(w) for w in w0]
    barrier = threading.Barrier(n, timeout=TIMEOUT)

    def worker(k):
        def run():
            gm = GradManager().attach([ws[k]])
            x = eg.tensor(xs[k])
            for _ in range(rounds):
                gm.record()
                barrier.wait()  # all four record now
                loss = ((x @ ws[k]) ** 2).sum()
                barrier.wait()  # every forward ran while all four recorded
                gm.backward(loss)  # releases this one while others may still record
                barrier.wait()
        return run

    _run_threads([worker(k) for k in range(n)], barrier=barrier)
    for k in range(n):
        np.testing.assert_allclose(ws[k].grad.numpy(), rounds * _quadratic(xs[k], w0[k]),
                                   rtol=1e-5, err_msg=f"thread {k}")
    _assert_main_thread_records()


def _assert_main_thread_records():
    """After other threads recorded and released, the main thread's GradManager still fills
    `.grad` (eagerly and through a region)."""
    w = eg.Parameter([1.0, -2.0, 3.0])
    gm = GradManager().attach([w])
    with gm:
        gm.backward((w * w).sum())
    assert w.grad is not None, "gm.backward in the main thread left .grad None"
    np.testing.assert_allclose(w.grad.numpy(), [2.0, -4.0, 6.0])
    v = eg.Parameter([0.5, 1.0])
    region = partial_trace(lambda a: (a * a * 3).sum())
    gm = GradManager().attach([v])
    with gm:
        gm.backward(region(v))
    assert v.grad is not None, "gm.backward over a region in the main thread left .grad None"
    np.testing.assert_allclose(v.grad.numpy(), [3.0, 6.0])


def test_grad_managers_start_recording_in_other_threads_while_one_thread_captures():
    # Thread 0 records and captures a region; the others start recording while that capture is
    # open and finish after it: the capture's own recording setup must neither swallow their
    # recording nor, when it ends, undo it (which left the count negative and every later
    # gm.backward in the process silently without gradients).
    n = 4
    xs = [randn_array(5, 3, seed=k) for k in range(n)]
    w0 = [randn_array(3, 2, seed=20 + k) for k in range(n)]
    ws = [eg.Parameter(w) for w in w0]
    in_capture, all_recording, capture_done = (threading.Event() for _ in range(3))
    recording = threading.Barrier(n - 1, timeout=TIMEOUT, action=all_recording.set)

    @partial_trace
    def region(x, w):
        h = x @ w
        in_capture.set()
        _wait(all_recording, "the other threads to record")
        return h

    def capturing_thread():
        gm = GradManager().attach([ws[0]])
        with gm:
            h = region(eg.tensor(xs[0]), ws[0])
            capture_done.set()
            gm.backward((h ** 2).sum())

    def recording_thread(k):
        def run():
            gm = GradManager().attach([ws[k]])
            _wait(in_capture, "the capture to start")
            gm.record()
            recording.wait()
            _wait(capture_done, "the capture to end")
            loss = ((eg.tensor(xs[k]) @ ws[k]) ** 2).sum()
            gm.backward(loss)
        return run

    _run_threads([capturing_thread] + [recording_thread(k) for k in range(1, n)],
                 barrier=recording, events=(in_capture, all_recording, capture_done))
    for k in range(n):
        assert ws[k].grad is not None, f"thread {k} got no gradient"
        # atol: an element near 0 computed on a GPU (1.7e-5 relative on an H200)
        np.testing.assert_allclose(ws[k].grad.numpy(), _quadratic(xs[k], w0[k]), rtol=1e-5,
                                   atol=1e-6, err_msg=f"thread {k}")
    _assert_main_thread_records()


# ----- several threads calling one compiled function -------------------------------------------
def _train_step(net, opt, x, y):
    gm = GradManager().attach(net.parameters())
    return training_step(gm, opt, lambda: F.cross_entropy(net(x), y))


def _batches(k: int, steps: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(randn_array(8, 6, seed=100 * k + i), _labels(8, 3, seed=100 * k + i))
            for i in range(steps)]


def _train_alone(k: int, steps: int, step_fn: Callable) -> tuple[list, dict]:
    net = _mlp(k)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    losses = [step_fn(net, opt, eg.tensor(x), eg.tensor(y)).numpy()
              for x, y in _batches(k, steps)]
    return losses, _state(net, opt)


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree
@pytest.mark.slow
def test_threads_training_their_own_models_with_one_xla_trace_step_match_training_alone():
    n, steps = 4, 4
    want = [_train_alone(k, steps, _train_step) for k in range(n)]  # eagerly, one at a time
    step = xla_trace(_train_step)
    models = [_mlp(k) for k in range(n)]
    opts = [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]
    losses: list[list] = [[] for _ in range(n)]
    barrier = threading.Barrier(n, timeout=TIMEOUT)

    def worker(k):
        def run():
            barrier.wait()  # the first calls (captures) start together
            for x, y in _batches(k, steps):
                losses[k].append(step(models[k], opts[k], eg.tensor(x), eg.tensor(y)).numpy())
        return run

    _run_threads([worker(k) for k in range(n)], barrier=barrier)
    for k in range(n):
        assert_all_close(losses[k], want[k][0], rtol=2e-5, atol=2e-5)
        _assert_states_close(_state(models[k], opts[k]), want[k][1], f"model {k}")


def _shared_step_world(compiled: bool):
    net = _mlp(7)
    opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        return _train_step(net, opt, x, y)

    return (xla_trace(step) if compiled else step), net, opt


def test_threads_training_one_shared_model_with_one_xla_trace_step_match_serial_steps():
    # Every call is the same map of the model's state (same batch), so serialised calls in any
    # order give the serial result; a lost or torn update would not.
    n, calls = 4, 3
    x, y = randn_array(8, 6, seed=1), _labels(8, 3, seed=1)
    step, net, opt = _shared_step_world(compiled=False)
    want_losses = [step(eg.tensor(x), eg.tensor(y)).numpy() for _ in range(n * calls)]
    want = _state(net, opt)
    step, net, opt = _shared_step_world(compiled=True)
    losses: list = []
    barrier = threading.Barrier(n, timeout=TIMEOUT)

    def worker():
        barrier.wait()
        for _ in range(calls):
            losses.append(step(eg.tensor(x), eg.tensor(y)).numpy())

    _run_threads([worker] * n, barrier=barrier)
    # The losses are those of the serial steps, each exactly once, in some order.
    np.testing.assert_allclose(np.sort(np.array(losses)), np.sort(np.array(want_losses)),
                               rtol=2e-5, atol=2e-5)
    _assert_states_close(_state(net, opt), want, "shared model")
    # However many captures concurrent first calls made, later calls are served from the cache.
    captures = step.cache_info().captures
    step(eg.tensor(x), eg.tensor(y))
    assert step.cache_info().captures == captures


def _train_with_region(k, steps, backbone, net, opt):
    """Backbone through `backbone(module, x)`, eager head, this thread's GradManager."""
    gm = GradManager().attach(net.parameters())
    body, head = net[:3], net[3]  # the slice holds the same modules: made once, passed each step
    losses = []
    for x, y in _batches(k, steps):
        with gm:
            feats = backbone(body, eg.tensor(x))
            loss = F.cross_entropy(head(feats), eg.tensor(y))
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.numpy())
    return losses


def test_threads_training_their_own_models_through_one_partial_trace_region_match_alone():
    n, steps = 4, 4

    def body(module, x):
        return module(x)

    want = []
    for k in range(n):
        net = _mlp(k)
        opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        want.append((_train_with_region(k, steps, body, net, opt), _state(net, opt)))
    backbone = partial_trace(body)
    models = [_mlp(k) for k in range(n)]
    opts = [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]
    losses: list = [None] * n
    barrier = threading.Barrier(n, timeout=TIMEOUT)

    def worker(k):
        def run():
            barrier.wait()
            losses[k] = _train_with_region(k, steps, backbone, models[k], opts[k])
        return run

    _run_threads([worker(k) for k in range(n)], barrier=barrier)
    for k in range(n):
        assert_all_close(losses[k], want[k][0], rtol=2e-5, atol=2e-5)
        _assert_states_close(_state(models[k], opts[k]), want[k][1], f"model {k}")


def test_threads_sharing_a_region_and_its_model_under_their_own_grad_managers_match_serial():
    # One backbone (its BatchNorm statistics are written by every call) shared by four threads,
    # each with its own GradManager, its own eager head and its own input to differentiate.
    # On the same batch every call updates the statistics the same way, so serialised calls in
    # any order end where the same number of serial calls do, and each thread's gradients are
    # what it gets alone.
    n, calls = 4, 3
    x_np, target = randn_array(8, 6, seed=3), randn_array(8, 2, seed=4)

    def world(compiled):
        body = _mlp(11)[:3]

        def fn(x):
            return body(x)

        return body, (partial_trace(fn) if compiled else fn)

    def make_head(k):  # in the main thread: a Linear draws its initial values from the one RNG
        head = M.Linear(12, 2)
        rng = np.random.default_rng([k, 5])
        head.load_state_dict({"weight": rng.standard_normal((2, 12)).astype(np.float32),
                              "bias": np.zeros(2, np.float32)})
        return head

    def work(region, head):
        x = eg.tensor(x_np)
        gm = GradManager().attach([x] + head.parameters())
        opt = optim.SGD(head.parameters(), lr=0.1)
        losses = []
        for _ in range(calls):
            with gm:
                loss = ((head(region(x)) - eg.tensor(target)) ** 2).mean()
                gm.backward(loss)
            opt.step().clear_grad()
            losses.append(loss.numpy())
        return losses, x.grad.numpy(), head.state_dict()

    body, region = world(compiled=False)
    want = [work(region, make_head(k)) for k in range(n)]
    want_body = body.state_dict()
    body, region = world(compiled=True)
    heads = [make_head(k) for k in range(n)]
    got: list = [None] * n
    barrier = threading.Barrier(n, timeout=TIMEOUT)

    def worker(k):
        def run():
            barrier.wait()
            got[k] = work(region, heads[k])
        return run

    _run_threads([worker(k) for k in range(n)], barrier=barrier)
    for k in range(n):
        assert_all_close(got[k][0], want[k][0], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(got[k][1], want[k][1], rtol=2e-5, atol=2e-5,
                                   err_msg=f"thread {k}: x.grad")
        _assert_states_close(got[k][2], want[k][2], f"thread {k}: head")
    _assert_states_close(body.state_dict(), want_body, "the shared backbone")
    captures = region.cache_info().captures
    region(eg.tensor(x_np))
    assert region.cache_info().captures == captures
