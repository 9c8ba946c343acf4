"""Per-thread execution context: the capture observing eager execution, the structure epoch, and
commits that no signal handler can cut in half.

The capture hooks are held in a `contextvars.ContextVar`, so a capture running in one thread never
sees eager code running in another (each thread starts with no capture). The tape's recording
state is per thread the same way (`tape.py`). `epoch` is process-wide on purpose: it counts
changes of module structure, which is shared state.

This module imports nothing from the rest of `eager`: tensors, modules, optimizers and the tape
import it, and `hooks.py` re-exports it as the documented surface for captures.
"""

from __future__ import annotations

import _signal  # signal.getsignal without its enum conversion (2 us per call, on every commit)
import contextvars
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any


class CaptureHooks:
    """The interface a capture implements; the defaults here are what eager does without one.

    A capture that sets `defers` receives every op call through `defer` instead of the
    dispatcher running it: a lazy capture records the op and returns placeholder outputs.
    """

    defers = False
    # Whether a bool-mask selection may stay traced: its length a traced value, its storage
    # padded to a fixed capacity (eager/core/ragged.py), instead of a host read of the mask.
    traced_lengths = False

    def defer(self, op: Any, attrs: tuple, inputs: Sequence) -> Any:
        """With `defers` set: return the Tensor (or tuple of Tensors, for multi-output ops)
        that `op` with static attributes `attrs` (a tuple of (name, value)) would return for
        `inputs`, without the dispatcher computing it."""
        raise NotImplementedError

    def read(self, tensor: Any) -> Any:
        """Return the array an op should use for `tensor` (a tracer, during capture)."""
        return tensor._data

    def applied(self, op: Any, attrs: tuple, inputs: tuple, arrays: list,
                outputs: tuple) -> None:
        """Called after the dispatcher ran `op` on `inputs` (read as `arrays`) and wrapped its
        results in the Tensors `outputs`, with their gradient history set."""

    def rebind(self, tensor: Any, value: Any) -> None:
        """Called before `tensor`'s storage is replaced by `value`."""

    def value_read(self, tensor: Any, what: str) -> None:
        """Called before a host read of `tensor`'s value (`what` is e.g. ".item()"); may raise."""

    def created(self, tensor: Any) -> None:
        """Called for every Tensor created while the capture is active."""

    def module_call(self, module: Any) -> None:
        """Called when a Module is called."""

    def module_created(self, module: Any) -> None:
        """Called when a Module is constructed (before its attributes are set)."""

    def module_setattr(self, module: Any, name: str, old: Any, value: Any) -> None:
        """Called before `module.name = value` replaces `old`; may raise."""

    def grad_read(self, tensor: Any) -> None:
        """Called before `tensor.grad` is read."""

    def grad_write(self, tensor: Any, value: Any) -> None:
        """Called before `tensor.grad` is set to `value` (a Tensor or None)."""

    def hyper(self, optimizer: Any, group: dict, key: str, value: Any) -> Any:
        """Return the value `optimizer` should use for hyper-parameter `key` of its param group
        `group` (an input array, during capture)."""
        return value

    def hyper_write(self, optimizer: Any, group: dict, key: str, value: Any) -> None:
        """Called before a param group's setting `key` is set to `value` (`sched.step()`,
        `opt.param_groups[0]["lr"] = ...`); may raise."""

    def manager_created(self, manager: Any) -> None:
        """Called when a GradManager is constructed."""

    def untracked(self, array: Any) -> Any:
        """Return the array for the output of a differentiable op that records no gradient
        history (inside `no_grad`, `detach()`, inputs that need no gradient). A capture that is
        differentiated as a whole cuts the gradient there, as the eager tape does."""
        return array

    def function_call(self, function: Any) -> None:
        """Called when a custom autodiff `Function` is called; may raise."""

    def backward(self, manager: Any, y: Any = None, dy: Any = None) -> None:
        """Called when `GradManager.backward(y, dy)` starts; may raise."""

    def constant(self, make: Callable[[], Any]) -> Any:
        """Return `make()`, the array of a tensor made from values that depend on no tensor
        (`eg.zeros`, `eg.tensor([...])`); `make` may be called again later."""
        return make()

    def recording(self, manager: Any, on: bool) -> None:
        """Called when `manager` starts (`on`) or stops recording (a backward ends with it)."""


_ACTIVE: contextvars.ContextVar[CaptureHooks | None] = contextvars.ContextVar(
    "eager_capture", default=None)
current = _ACTIVE.get  # the capture active in this thread, or None (one C call: the hot path)


class capturing:  # noqa: N801  (used as a function: `with capturing(hooks):`)
    """Install `hooks` in this thread for the duration of the block (nesting restores the outer
    hooks); `None` runs the block plainly eagerly, e.g. a block a capture excludes. (A class
    rather than a generator: regions with graph breaks enter it several times per call.)"""

    __slots__ = ("hooks", "token")

    def __init__(self, hooks: CaptureHooks | None):
        self.hooks = hooks

    def __enter__(self) -> CaptureHooks | None:
        self.token = _ACTIVE.set(self.hooks)
        return self.hooks

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.reset(self.token)


def hand_over(hooks: CaptureHooks) -> None:
    """Make `hooks` the active capture of this thread in place of the current one, until the
    enclosing `capturing` block ends (it restores what was active before it): a capture that
    cannot go on hands the rest of the region to another engine."""
    _ACTIVE.set(hooks)


_epoch = [0]


def bump_epoch() -> None:
    """Record that some module's structure or training flag changed (call it after the
    change, so a guard that re-validates on the new epoch sees the new structure)."""
    _epoch[0] += 1


def epoch() -> int:
    """How many structure changes `bump_epoch` recorded: a cache re-validates its module
    guards only when this moved, so the common call checks one integer."""
    return _epoch[0]


# ----- commits ---------------------------------------------------------------------------------
# Note [deferred signals]
# A Python signal handler runs in the main thread at the interpreter's next check, wherever that
# is; one that raises (Ctrl-C's KeyboardInterrupt, a SIGTERM handler's SystemExit, a SIGALRM
# timeout) would cut a commit after old buffers were donated and before the new ones are bound.
# So while an `atomic` block runs, every Python-level handler is held back: on entering the
# outermost block each handler the program installed is wrapped in a `_Deferred`, which runs it
# at once outside commits and only notes the signal inside one; the notes are delivered when the
# outermost block ends. Blocking signals with `pthread_sigmask` is not enough: it blocks them for
# the calling thread only, and a process-directed signal (`kill`, a terminal's Ctrl-C, a
# scheduler's SIGTERM) is then taken by one of XLA's threads, whose C-level handler still
# schedules the Python handler in the main thread. The wrappers stay installed between blocks;
# checking that none was replaced costs one `getsignal` per signal number per outermost block
# (about 3 us for Linux's 60). Signals reach only the main thread, so this state is its own.
_MAIN = threading.main_thread().ident
_CATCHABLE = tuple(int(s) for s in signal.valid_signals()
                   if s not in (signal.SIGKILL, signal.SIGSTOP))
_installed: tuple = ()  # every handler as the last check left it
_deferring = 0
_pending: dict[int, Callable] = {}  # signal number -> the handler it is due to, in arrival order


class _Deferred:
    """A program's signal handler as installed while commits may run: it runs the handler at
    once outside an `atomic` block and notes the signal for the block's end inside one.
    `signal.getsignal` returns this wrapper; its `handler` is the program's."""

    __slots__ = ("handler",)

    def __init__(self, handler: Callable) -> None:
        self.handler = handler

    def __call__(self, signum: int, frame: Any) -> Any:
        if _deferring:
            _pending.setdefault(signum, self.handler)
            return None
        return self.handler(signum, frame)

    def __repr__(self) -> str:
        return f"<deferred in commits: {self.handler!r}>"


def _wrap_handlers() -> None:
    """Wrap every Python-level handler that is not wrapped yet (cheap when none changed)."""
    global _installed
    found = tuple(map(_signal.getsignal, _CATCHABLE))
    if found == _installed:
        return
    for signum, handler in zip(_CATCHABLE, found):
        if callable(handler) and not isinstance(handler, _Deferred):
            # signal.signal runs a pending handler before it changes anything: one that raises
            # here leaves nothing behind (the block has not begun)
            _signal.signal(signum, _Deferred(handler))
    _installed = tuple(map(_signal.getsignal, _CATCHABLE))


def _deliver(frame: Any) -> None:
    """Run the handlers of the signals that arrived during the block, in arrival order; all of
    them run, and the first exception one raises is raised after the last."""
    due = list(_pending.items())
    _pending.clear()
    error: BaseException | None = None
    for signum, handler in due:
        try:
            handler(signum, frame)
        except BaseException as e:  # noqa: BLE001  (re-raised below, after the other handlers)
            error = error or e
    if error is not None:
        raise error


class atomic:  # noqa: N801  (used as a function: `with atomic():`)
    """Hold back every Python signal handler (Ctrl-C's KeyboardInterrupt, a SIGTERM or SIGALRM
    handler that raises) until the block ends, so that a commit (binding the new buffers of
    several tensors, after the old ones were donated) is never cut in half: a handler runs
    right after the block instead. Signals reach only the main thread, so elsewhere this does
    nothing; nested blocks defer to the outermost. See Note [deferred signals].

    >>> with atomic():
    ...     pass
    """

    __slots__ = ("active",)

    def __enter__(self) -> atomic:
        global _deferring
        self.active = False
        if threading.get_ident() != _MAIN:
            return self
        if not _deferring:
            _wrap_handlers()
        _deferring += 1
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        global _deferring
        if not self.active:
            return
        _deferring -= 1
        if not _deferring and _pending:
            _deliver(sys._getframe(1))
