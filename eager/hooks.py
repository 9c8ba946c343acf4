"""The hook points through which a capture (the `partial` package) observes eager execution, and
the small tape surface it uses to make a compiled segment one node of the eager tape.

Eager code calls the hooks at its few choke points: every read of a tensor's storage by an op,
every rebind of a tensor's storage (`x[i] = v`, optimizer updates, BatchNorm statistics, the RNG
key), every value read (`.numpy()`, `.item()`, `bool()`), every tensor creation, module creation and
call, module attribute assignment, `.grad` read and write, optimizer hyper-parameter read, custom
`Function` call and `GradManager.backward`. With no capture active (`active is None`) each costs
one global lookup.

A capture installs an object implementing `CaptureHooks` with `capturing(hooks)`; nothing else in
eager changes behaviour.

`epoch` counts changes of module structure (a Tensor or Module attribute assigned) and of
training flags, anywhere: a cache of compiled regions re-validates its module guards only when it
moved, so the common call checks one integer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class CaptureHooks:
    """The interface a capture implements; the defaults here are what eager does without one.

    A capture that sets `defers` receives every op call through `defer` instead of the
    dispatcher running it: a lazy capture records the op and returns placeholder outputs.
    """

    defers = False

    def defer(self, op: Any, attrs: tuple, inputs: tuple) -> Any:
        """With `defers` set: return the Tensor (or tuple of Tensors, for multi-output ops)
        that `op` with static attributes `attrs` (a tuple of (name, value)) would return for
        `inputs`, without the dispatcher computing it."""
        raise NotImplementedError

    def read(self, tensor: Any) -> Any:
        """Return the array an op should use for `tensor` (a tracer, during capture)."""
        return tensor._data

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

    def untracked(self, array: Any) -> Any:
        """Return the array for the output of a differentiable op that records no gradient
        history (inside `no_grad`, `detach()`, inputs that need no gradient). A capture that is
        differentiated as a whole cuts the gradient there, as the eager tape does."""
        return array

    def function_call(self, function: Any) -> None:
        """Called when a custom autodiff `Function` is called; may raise."""

    def backward(self, manager: Any) -> None:
        """Called when `GradManager.backward` starts; may raise."""


active: CaptureHooks | None = None
epoch = 0


class capturing:  # noqa: N801  (used as a function: `with capturing(hooks):`)
    """Install `hooks` for the duration of the block (nesting restores the outer hooks);
    `None` runs the block plainly eagerly, e.g. a block a capture excludes. (A class rather
    than a generator: regions with graph breaks enter it several times per call.)"""

    __slots__ = ("hooks", "outer")

    def __init__(self, hooks: CaptureHooks | None):
        self.hooks = hooks

    def __enter__(self) -> CaptureHooks | None:
        global active
        self.outer, active = active, self.hooks
        return self.hooks

    def __exit__(self, *exc: Any) -> None:
        global active
        active = self.outer


def bump_epoch() -> None:
    """Record that some module's structure or training flag changed."""
    global epoch
    epoch += 1


# ----- the tape surface -----------------------------------------------------------------------
def wrap(array: Any) -> Any:
    """A Tensor holding `array` as it is: no copy, no device move, no gradient history."""
    return _tensor._wrap(array)


def is_recording() -> bool:
    """True when an op on a tensor with gradient history would be recorded now."""
    return _tape.is_recording()


def needs_grad(tensor: Any) -> bool:
    """True when a gradient would flow to `tensor` from an op recorded now: a GradManager
    records, and `tensor` is attached to it or derived from an attached tensor, and is float."""
    return ((tensor._node is not None or tensor._tracked > 0) and tensor._data.dtype.kind in "fc"
            and _tape.is_recording())


def make_node(name: str, inputs: Sequence[Any], outputs: Sequence[Any],
              backward: Callable[[list], Sequence[Any]]) -> None:
    """Record one node of the eager tape: `outputs` (Tensors) now depend on `inputs` (Tensors).

    In a backward pass `backward(cotangents)` receives one array per output (zeros for outputs
    that got no gradient) and returns one array (or None) per input.
    """
    node = _tape.Node(name, backward, [_tape.parent_of(t) for t in inputs],
                      [(o._data.shape, o._data.dtype) for o in outputs])
    for i, o in enumerate(outputs):
        o._node, o._out_idx = node, i


def set_history(tensor: Any, node: Any, out_idx: int = 0) -> None:
    """Give `tensor` the gradient history `(node, out_idx)` without telling any capture (a
    capture's own bookkeeping, like `set_data`)."""
    tensor._node, tensor._out_idx = node, out_idx


def history(tensor: Any) -> tuple[Any, int]:
    """The gradient history of `tensor`, to hand to `eager.rebind(other, value, *history)`."""
    return tensor._node, tensor._out_idx


# ----- what a capture changes on tensors, and puts back ----------------------------------------
def snapshot(tensor: Any) -> tuple:
    """What a region may change on `tensor`: storage, gradient history, `.grad`. (Tracking
    counts are not saved: GradManagers inside a region balance their own.)"""
    return tensor._data, tensor._node, tensor._out_idx, tensor._grad


def restore(tensor: Any, snap: tuple) -> None:
    """Put back what `snapshot(tensor)` saw."""
    tensor._data, tensor._node, tensor._out_idx, tensor._grad = snap


def data(tensor: Any) -> Any:
    """`tensor`'s storage as it is (no capture sees this read)."""
    return tensor._data


def deref(refs: Sequence[Callable[[], Any]]) -> tuple[list, list] | None:
    """The tensors behind weak references `refs` and their storage, or None if one died."""
    tensors = [r() for r in refs]
    try:
        return tensors, [t._data for t in tensors]
    except AttributeError:  # a reference died (None has no storage)
        return None


def assign(targets: Sequence[Any], sources: Sequence[Any]) -> None:
    """Give each target (None: skipped) the storage and gradient history of its source: how
    a compiled call writes its results back into the tensors a region updated."""
    for t, s in zip(targets, sources):
        if t is not None:
            if active is not None:
                active.rebind(t, s._data)
            t._data, t._node, t._out_idx = s._data, s._node, s._out_idx


def raw_grad(tensor: Any) -> Any:
    """`tensor.grad` without telling any capture."""
    return tensor._grad


def set_data(tensor: Any, array: Any) -> None:
    """Replace `tensor`'s storage without telling any capture (a capture's own bookkeeping)."""
    tensor._data = array


def mark_leaf(tensor: Any) -> bool:
    """Make `tensor` a fresh leaf that ops record gradients for (while a tape state that
    records is set): a capture differentiated as a whole tracks every input this way. Returns
    whether it is now tracked (float tensors only); undo that with `unmark_leaf`."""
    tensor._node, tensor._out_idx = None, 0
    if tensor._data.dtype.kind in "fc":
        tensor._tracked += 1
        return True
    return False


def unmark_leaf(tensor: Any) -> None:
    """Undo the tracking `mark_leaf` added."""
    tensor._tracked -= 1


def tape_state() -> tuple[int, int]:
    """The global recording state (recording GradManagers, no_grad depth)."""
    return _tape.STATE.recording, _tape.STATE.paused


def set_tape_state(state: tuple[int, int]) -> None:
    """Set the global recording state, e.g. to record privately during a capture."""
    _tape.STATE.recording, _tape.STATE.paused = state


def leaf_dependencies(tensors: Sequence[Any]) -> list[list[Any]]:
    """For each tensor, the leaf tensors its recorded gradient history reaches."""
    return _tape.leaf_dependencies(tensors)


# Imported last: tensor.py and tape.py import this module.
from . import tape as _tape  # noqa: E402
from . import tensor as _tensor  # noqa: E402

# The bridge calls these once per output and per call: bind them directly (same behaviour).
wrap = _tensor._wrap  # noqa: F811
is_recording = _tape.is_recording  # noqa: F811
