"""Signals: Ctrl-C, a cluster's SIGTERM or a SIGALRM timeout whose handler raises, arriving at
any moment of a training step, leave the model, the optimizer, the GradManager and the RNG key
readable and consistent, and training goes on.

Each test trains a tiny model (a BatchNorm and dropout, so buffers and the RNG key are state too)
for a few hundred steps, each interrupted after a random delay within about one step by one kind
of signal, sent the way users get it (`KINDS`): SIGINT with Python's own handler
(KeyboardInterrupt), SIGTERM with the usual handler that raises SystemExit so that `finally:`
blocks save a checkpoint, both sent to the process by `os.kill` from a timer thread (so any
thread, one of XLA's included, may take it), and SIGALRM from `signal.setitimer` with a handler
that raises TimeoutError. After every step, interrupted or not, the test checks:

- every parameter, `.grad`, buffer, optimizer state tensor and the RNG key is readable
  (`.numpy()`), and `state_dict()` works on the model and the optimizer;
- the state is the state before the step or the state after it, as an eager reference run of
  the same step from the same state gives. What "the step" is depends on the mode: for
  `xla_trace` the whole step is one compiled call, so everything is before or after; for a
  `partial_trace` body with an eager head the compiled call (its BatchNorm statistics and RNG
  key) and `opt.step()` (parameters with their optimizer state) are each before or after; in
  eager training each framework call is atomic, so the parameters and their optimizer state
  are before or after `opt.step()`. In every mode, parameters after `opt.step()` mean the
  forward's state is after too;
- a step that ran to its end without an interrupt gives the reference's state, so the steps
  after an interrupt run normally.

The reference is a second, eager copy of the model loaded with the state before each step, so
the checks hold whatever earlier interrupts did, and a broken recovery (say, gradients no
longer recorded) cannot pass as "the state before".
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace

STEPS = 200
WARMUP = 6  # uninterrupted steps first: compiling, then timing the step
BATCH = 16


class Kind:
    """One kind of signal as users get it: `handler` is what the program installs (it counts its
    calls and raises `error`), `arm(delay)` sends the signal once after `delay` seconds and
    `cancel()` cancels one not yet sent."""

    def __init__(self, name: str, signum: int, error: type[BaseException],
                 handler: Callable | None = None):
        self.name, self.signum, self.error = name, signum, error
        self._raise = handler
        self._sender: threading.Thread | None = None
        self._flags: dict[str, bool] = {}
        self.calls = 0

    def handler(self, signum: int, frame: object) -> None:
        self.calls += 1
        if self._raise is None:
            signal.default_int_handler(signum, frame)
        self._raise(signum)

    def arm(self, delay: float) -> None:
        """Send the signal once, `delay` seconds from now."""
        if self.signum == signal.SIGALRM:  # the kernel's timer: no thread of ours involved
            signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6))
            return
        # The sender and the main thread share no lock: the handler's exception may land
        # anywhere in the main thread, and one landing between a lock's acquire and its `try:`
        # (threading.Timer.cancel, Thread.join) would leave the lock held for good. Plain flags
        # only, and the sender is joined once it has said it is done and its signal is handled.
        self._flags = flags = {"armed": False, "cancelled": False, "done": False}

        def send():
            time.sleep(delay)
            while not flags["armed"]:  # not before `start()` has returned in the main thread
                time.sleep(1e-4)
            if not flags["cancelled"]:
                os.kill(os.getpid(), self.signum)
            flags["done"] = True

        self._sender = threading.Thread(target=send, daemon=True)
        self._sender.start()
        flags["armed"] = True

    def cancel(self) -> None:
        """Cancel a signal not yet sent and wait until the sender is done (idempotent; a signal
        it sent meanwhile is handled at the next check of the caller's loop)."""
        if self.signum == signal.SIGALRM:
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        if self._sender is None:
            return
        self._flags["cancelled"] = True
        while not self._flags["done"]:
            time.sleep(1e-4)

    def join(self) -> None:
        """Join the sender's thread (once its signal, if any, has been handled)."""
        if self._sender is not None:
            self._sender.join()
            self._sender = None


def _exit(signum: int) -> None:
    raise SystemExit(128 + signum)  # what `sys.exit` in a SIGTERM handler raises


def _timeout(signum: int) -> None:
    raise TimeoutError("the step took too long")


KINDS = {"SIGINT": lambda: Kind("SIGINT", signal.SIGINT, KeyboardInterrupt),
         "SIGTERM": lambda: Kind("SIGTERM", signal.SIGTERM, SystemExit, _exit),
         "SIGALRM": lambda: Kind("SIGALRM", signal.SIGALRM, TimeoutError, _timeout)}


@pytest.fixture
def kind(request):
    """The signal kind named by the test's `signal_kind` parameter, its handler installed, and
    a short switch interval, so the sender gets the interpreter lock soon after its delay and
    signals land all over the step rather than at the few places that release the lock (the
    default interval, 5 ms, is longer than a compiled step). Python's own SIGINT handler is
    installed too: a test runner's worker may ignore SIGINT."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread; the test is not running there")
    k = KINDS[request.param]()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, k.signum)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(k.signum, k.handler)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5e-5)
    yield k
    sys.setswitchinterval(interval)
    for s, h in saved.items():
        signal.signal(s, h)


# ----- the model, trained three ways -----------------------------------------------------------
class Trainer:
    """A tiny classifier and its optimizer, trained by `step(x, y)` in one of three modes:
    "eager", "partial_trace" (the body compiled, the head and the update eager) or "xla_trace"
    (the whole step compiled). `compiled` is the traced function (None when eager)."""

    def __init__(self, mode: str, optimizer: str, blocks: int = 2):
        # No bias before a BatchNorm: its gradient is round-off, which Adam would blow up to
        # +-lr with a sign that differs between compiled and eager evaluation. Two blocks by
        # default: more tensors to write back, so a longer window for interrupts to land in the
        # framework's work around the compiled call.
        layers = []
        for i in range(blocks):
            layers += [M.Linear(8 if i == 0 else 32, 32, bias=False), M.BatchNorm1d(32),
                       M.ReLU(), M.Dropout(0.25)]
        self.body = M.Sequential(*layers)
        self.head = M.Linear(32, 4)
        self.net = M.Sequential(self.body, self.head)
        params = self.net.parameters()
        self.opt = (optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
                    if optimizer == "sgd" else optim.Adam(params, lr=1e-2))
        self.gm = GradManager().attach(params)
        body = self.body
        self.compiled = None
        if mode == "partial_trace":
            body = self.compiled = partial_trace(self._body)

        def step(x, y):
            # Gradients are cleared first, so the step leaves its own gradients set: they are
            # state that must be before-or-after too.
            self.opt.clear_grad()
            with self.gm:
                loss = F.cross_entropy(self.head(body(x)), y)
                self.gm.backward(loss)
            self.opt.step()
            return loss

        if mode == "xla_trace":  # (a test captures it over and over: no recompile warnings)
            step = self.compiled = xla_trace(step, recompile_limit=100)
        self.step: Callable = step

    def _body(self, x):
        return self.body(x)

    def load(self, state: dict) -> None:
        """Set parameters, buffers, optimizer state, `.grad` and the RNG key to `state`."""
        self.net.load_state_dict({k: state[k] for k in self.net.state_dict()})
        for name, p in self.net.named_parameters():
            g = state[f"{name}.grad"]
            p.grad = None if g is None else eg.tensor(g)
        for j, slots in enumerate(self.opt.state.values()):
            for k, t in slots.items():
                eg.rebind(t, eg.read(eg.tensor(state[f"optimizer.{j}.{k}"])))
        set_key(state["rng"])


def set_key(key: np.ndarray) -> None:
    eg.rebind(eg.random.get_state(), eg.read(eg.tensor(key)))


def _batches(n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(12)
    return [(rng.standard_normal((BATCH, 8)).astype(np.float32),
             rng.integers(0, 4, BATCH).astype(np.int32)) for _ in range(n)]


# ----- state: snapshots, groups, comparisons ---------------------------------------------------
def snapshot(tr: Trainer, when: str) -> dict:
    """Every piece of training state as numpy arrays (None for an absent `.grad`); fails the
    test, saying what and when, if any of it cannot be read."""
    state: dict = {}

    def read(name: str, get: Callable) -> None:
        try:
            state[name] = get()
        except Exception as e:  # noqa: BLE001  (turned into a failure that names the tensor)
            pytest.fail(f"{when}: {name} is unreadable: {type(e).__name__}: {e}")

    for name, p in tr.net.named_parameters():
        read(name, p.numpy)
        read(f"{name}.grad", lambda p=p: None if p.grad is None else p.grad.numpy())
    for name, b in tr.net.named_buffers():
        read(name, b.numpy)
    for j, slots in enumerate(tr.opt.state.values()):
        for k, t in slots.items():
            read(f"optimizer.{j}.{k}", t.numpy)
    read("rng", lambda: eg.random.get_state().numpy())
    read("model.state_dict()", tr.net.state_dict)
    read("optimizer.state_dict()", tr.opt.state_dict)
    del state["model.state_dict()"], state["optimizer.state_dict()"]
    return state


def groups(tr: Trainer) -> dict[str, list[str]]:
    """State names by what writes them: `opt.step()` (parameters and their optimizer state),
    the forward (BatchNorm statistics and the RNG key) and the backward (`.grad`)."""
    params = [n for n, _ in tr.net.named_parameters()]
    slots = [f"optimizer.{j}.{k}" for j, s in enumerate(tr.opt.state.values()) for k in s]
    return {"update": params + slots,
            "forward": [n for n, _ in tr.net.named_buffers()] + ["rng"],
            "grads": [f"{n}.grad" for n in params]}


def _equal(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def _close(a, b) -> bool:
    """Compiled and eager float32 results agree to round-off; everything else exactly."""
    if a is None or b is None or a.dtype.kind != "f":
        return _equal(a, b)
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5)


def _where_one(value, before, after) -> str:
    return "before" if _equal(value, before) else "after" if _close(value, after) else "neither"


def where(state: dict, before: dict, after: dict, names: list[str]) -> str:
    """"before", "after" or "torn": how the `names` of `state` relate to the states before
    and after the step (a group the step leaves unchanged counts as before)."""
    if all(_equal(state[n], before[n]) for n in names):
        return "before"
    if all(_close(state[n], after[n]) for n in names):
        return "after"
    return "torn"


def _describe(state: dict, before: dict, after: dict, names: list[str]) -> str:
    """Which of `names` are as before the step, which as after, and which neither."""
    found: dict[str, list[str]] = {}
    for n in names:
        found.setdefault(_where_one(state[n], before[n], after[n]), []).append(n)
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in found.items())


# ----- running a step under a timer ------------------------------------------------------------
def run_plainly(step: Callable[[], object]) -> tuple[bool, bool, bool]:
    """Run `step()` without a timer; returns as `run_with_interrupt` does."""
    step()
    return True, False, False


def run_with_signal(step: Callable[[], object], delay: float,
                    kind: Kind) -> tuple[bool, bool, bool]:
    """Run `step()` while `kind`'s signal is sent after `delay` seconds. Returns whether `step`
    returned, whether the handler's exception came out of it, and whether the handler ran but
    its exception never arrived. When this returns, the sender has finished and a signal it
    sent has been handled and its exception caught here, so none lands in the checks."""
    calls = kind.calls
    returned = interrupted = False
    error: BaseException | None = None
    # No call between the two `try` blocks: the interpreter runs a handler only at a call or a
    # backward jump, so the handler's exception lands inside one of them.
    try:
        kind.arm(delay)
        step()
        returned = True
    except kind.error:
        interrupted = True
    except BaseException as e:  # noqa: BLE001  (the step failed on its own: re-raised below)
        error = e
    delivered = interrupted
    while True:
        try:
            kind.cancel()
            # A signal sent but not yet handled is handled at the interpreter's next check,
            # which a loop iteration makes.
            for _ in range(10_000):
                pass
            lost = kind.calls > calls and not delivered
            break
        except kind.error:
            delivered = True
    kind.join()
    if error is not None:  # raised only now, so no signal lands in the report of it
        raise error
    return returned, interrupted, lost


# ----- one checked step ------------------------------------------------------------------------
class Run:
    """`tr` trained in `mode`, each step checked against `ref` (an eager copy loaded with the
    state before the step). `counts` says what the steps did."""

    def __init__(self, mode: str, optimizer: str, kind: Kind, blocks: int = 2):
        self.mode, self.kind = mode, kind
        self.tr = Trainer(mode, optimizer, blocks)
        self.ref = Trainer("eager", optimizer, blocks)
        self.ref.net.load_state_dict(self.tr.net.state_dict())
        self.parts = groups(self.tr)
        self.everything = [n for names in self.parts.values() for n in names]
        self.counts = {"steps": 0, "interrupted": 0, "kept before": 0, "after": 0,
                       "torn as allowed": 0, "interrupts lost": 0}

    def step(self, i: int, batch: tuple, run: Callable[[Callable], tuple], how: str) -> None:
        """Run step `i` on `batch` through `run(step) -> (returned, interrupted, lost)`
        (`run_plainly` or `run_with_signal`) and check the state after it."""
        try:
            self._step(i, batch, run, how)
        except (KeyboardInterrupt, SystemExit, self.kind.error) as e:  # never let one reach
            # the test runner: it would stop
            pytest.fail(f"step {i} ({self.mode}, {how}): {type(e).__name__} arrived after the "
                        f"step had returned and its signal had been handled: something held "
                        f"it back and raised it later\n{e!r}")
        except AssertionError:
            raise
        except Exception as e:  # the step itself (or the one after an interrupt) failed
            raise AssertionError(f"step {i} ({self.mode}, {how}) raised "
                                 f"{type(e).__name__}: {e}") from e

    def _step(self, i: int, batch: tuple, run: Callable[[Callable], tuple], how: str) -> None:
        x_np, y_np = batch
        before = snapshot(self.tr, f"before step {i}")
        self.ref.load(before)
        self.ref.step(eg.tensor(x_np), eg.tensor(y_np))
        after = snapshot(self.ref, f"the reference's step {i}")
        assert where(after, before, after, self.parts["update"]) == "after", \
            f"step {i}: the reference step did not update the parameters"
        set_key(before["rng"])  # the reference drew from the one generator: put it back
        x, y = eg.tensor(x_np), eg.tensor(y_np)
        returned, interrupted, lost = run(lambda: self.tr.step(x, y))
        when = (f"step {i} ({self.mode}, {how}: "
                f"{'interrupted' if interrupted else 'not interrupted'})")
        state = snapshot(self.tr, f"after {when}")
        c = self.counts
        c["steps"] += 1
        c["interrupted"] += interrupted
        c["interrupts lost"] += lost
        assert not self.tr.gm._recording, f"{when}: the GradManager was left recording"
        whole = where(state, before, after, self.everything)
        if returned and not interrupted:  # ran normally: the reference's step
            assert whole == "after", f"{when}: not the state after the step: " \
                f"{_describe(state, before, after, self.everything)}"
        update = where(state, before, after, self.parts["update"])
        forward = where(state, before, after, self.parts["forward"])
        assert update != "torn", f"{when}: parameters and optimizer state torn: " \
            f"{_describe(state, before, after, self.parts['update'])}"
        if update == "after":  # opt.step() ran, so the forward before it did
            assert forward == "after", f"{when}: parameters updated, not the forward's state: " \
                f"{_describe(state, before, after, self.parts['forward'])}"
        if self.mode == "xla_trace":  # one compiled call: all of it before or all after
            assert whole != "torn", f"{when}: not the state before or after the step: " \
                f"{_describe(state, before, after, self.everything)}"
        elif self.mode == "partial_trace":  # the compiled body's writes: all or nothing
            assert forward != "torn", f"{when}: the region's writes torn: " \
                f"{_describe(state, before, after, self.parts['forward'])}"
        c[{"before": "kept before", "after": "after"}.get(whole, "torn as allowed")] += 1


# ----- the tests -------------------------------------------------------------------------------
def _timed(durations: list[float]) -> Callable[[Callable], tuple[bool, bool, bool]]:
    """`run_plainly`, recording how long the step took."""
    def run(step: Callable[[], object]) -> tuple[bool, bool, bool]:
        start = time.perf_counter()
        outcome = run_plainly(step)
        durations.append(time.perf_counter() - start)
        return outcome
    return run


# A handler's exception raised in a garbage-collector callback (hypothesis installs one) is
# swallowed by Python itself and reported as unraisable: that signal is just missed.
@pytest.mark.slow  # ~2 min of signals; .ci/run runs the slow set after the README's command
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("kind", list(KINDS), indirect=True)
@pytest.mark.parametrize("mode, optimizer", [("eager", "sgd"), ("partial_trace", "adam"),
                                             ("xla_trace", "adam"), ("xla_trace", "sgd")])
def test_training_survives_signals_at_random_moments(mode, optimizer, kind):
    run = Run(mode, optimizer, kind)
    batches = _batches(WARMUP + STEPS)
    durations: list[float] = []
    for i in range(WARMUP):
        run.step(i, batches[i], _timed(durations), "warm-up")
    step_time = statistics.median(durations[2:])  # after the first calls compiled
    delays = np.random.default_rng(2024).uniform(0.0, step_time, STEPS)
    for i, delay in enumerate(delays, WARMUP):
        run.step(i, batches[i], lambda step, d=delay: run_with_signal(step, d, kind),
                 f"{kind.name} after {delay * 1e3:.2f} ms")
    # The delays span the step, so most signals land inside it; a floor well below that keeps
    # the test meaningful (it really interrupts steps) without depending on timing.
    assert run.counts["interrupted"] >= STEPS // 10, run.counts


TRIES = 3


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["SIGTERM"], indirect=True)
def test_a_signal_while_the_step_is_captured_and_compiled_loses_nothing(kind):
    # "At any moment" includes the first call: capture, compilation and the first run. After
    # cache_clear() every call is a first call; the signals are spread over one. (xla_trace
    # only, and a smaller step: each capture compiles, and partial_trace regions share the
    # capture engine.)
    run = Run("xla_trace", "sgd", kind, blocks=1)
    batches = _batches(2 * TRIES + 2)
    durations: list[float] = []
    run.step(0, batches[0], run_plainly, "first call")
    run.tr.compiled.cache_clear()
    run.step(1, batches[1], _timed(durations), "captured again after cache_clear()")
    for k in range(TRIES):
        delay = durations[0] * (k + 0.5) / TRIES
        run.tr.compiled.cache_clear()
        run.step(2 + 2 * k, batches[2 + 2 * k],
                 lambda step, d=delay: run_with_signal(step, d, kind),
                 f"capturing, {kind.name} after {delay * 1e3:.1f} ms")
        run.step(3 + 2 * k, batches[3 + 2 * k], run_plainly, "the call after")
    assert run.counts["interrupted"] >= TRIES // 2, run.counts
