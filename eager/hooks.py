"""The hook points through which a capture (the `partial` package) observes eager execution, and
the small tape surface it uses to make a compiled segment one node of the eager tape.

Eager code calls the hooks at its few choke points: every read of a tensor's storage by an op,
every rebind of a tensor's storage (`x[i] = v`, optimizer updates, BatchNorm statistics, the RNG
key), every value read (`.numpy()`, `.item()`, `bool()`), every tensor creation, module creation and
call, module attribute assignment, `.grad` read and write, optimizer hyper-parameter read, custom
`Function` call, `GradManager.attach` and `.backward`, and param-group writes. With no capture
active (`current()` is None) each costs one context-variable lookup.

A capture installs an object implementing `CaptureHooks` with `capturing(hooks)`, in the current
thread only (`current()` says which is active there); nothing else in eager changes behaviour.
The recording state of GradManagers is per thread too.

`epoch()` counts changes of module structure (a Tensor or Module attribute assigned) and of
training flags, anywhere: a cache of compiled regions re-validates its module guards only when it
moved, so the common call checks one integer. `atomic()` defers Ctrl-C over a commit.

`user_location()` finds the user's line and `describe_location` shows it, as eager's own errors
do (`user_frame.py`): a capture's messages name the line the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .core import ownership as _ownership
from .core import profiling
from .core import tape as _tape
from .core import tensors as _tensor
from .core.context import CaptureHooks, atomic, bump_epoch, capturing, current, epoch, hand_over
from .core.conv_switch import conv_options, conv_rewrites
from .core.quantized_tensors import tag as _tag_quantized
from .core.user_frame import describe_location, short_path, user_location

__all__ = [
    "CaptureHooks", "Finished", "atomic", "bump_epoch", "capturing", "current", "epoch",
    "hand_over", "wrap", "peek", "sole", "share", "hand_out", "conv_options", "conv_rewrites",
    "is_recording", "needs_grad", "make_node", "set_history", "history", "snapshot", "restore",
    "with_grad",
    "data", "deref", "assign", "raw_grad", "set_data", "mark_leaf", "unmark_leaf",
    "tape_state", "set_tape_state", "leaf_dependencies", "ragged_length",
    "set_ragged_length", "quantized_dtype", "set_quantized_dtype",
    "user_location", "describe_location", "short_path", "profiling",
]
# and, for a capture's compiled code: `profiling` times their calls inside `eager.profile()`


# ----- the tape surface -----------------------------------------------------------------------
# A Tensor holding an array as it is: no copy, no device move, no history. The caller hands the
# array over (a result it computed): the Tensor is its only holder, whose buffer may be donated.
wrap = _tensor._wrap
peek = _tensor.peek  # `eager.read` without handing the array out: for arrays passed on, not kept
sole = _ownership.sole  # whether a tensor is its array's only holder: its buffer may be donated
share = _ownership.share  # share(dst, src): dst now holds src's array
hand_out = _ownership.hand_out  # a tensor's array went where the framework cannot see it
is_recording = _tape.is_recording  # whether an op on a tracked tensor would be recorded now
differentiable = _tape.differentiable  # whether a dtype carries gradients (bfloat16 too)
Finished = _tape.Finished  # a leaf's gradient with its manager's callbacks applied


def needs_grad(tensor: Any) -> bool:
    """True when a gradient would flow to `tensor` from an op recorded now: a GradManager
    records, and `tensor` is attached to it or derived from an attached tensor, and is float."""
    return ((tensor._node is not None or tensor._tracked > 0)
            and _tape.differentiable(tensor._data.dtype) and _tape.is_recording())


def make_node(name: str, inputs: Sequence[Any], outputs: Sequence[Any],
              backward: Callable[[list], Sequence[Any]], sparse: bool = False,
              op: tuple | None = None, finish: Callable | None = None) -> None:
    """Record one node of the eager tape: `outputs` (Tensors) now depend on `inputs` (Tensors).

    In a backward pass `backward(cotangents)` receives one array per output (for outputs that
    got no gradient: zeros, or None when `sparse`) and returns one array (or None: no gradient
    reaches that input) per input. `op`, when given, is `(Op, attrs key, positions of `inputs`
    among its arguments, argument arrays)`: the same computation as an op, which a recorded
    backward (higher-order gradients) differentiates again. `finish(cotangents, sole,
    manager)`, when given, replaces `backward` in a backward pass run by a GradManager: the
    gradient of an input `i` with `sole[i]` (a leaf that gets its gradient from this node
    alone) may come back as `Finished(grad)`, the manager's callbacks already applied.
    """
    node = _tape.Node(name, backward, [_tape.parent_of(t) for t in inputs],
                      [(o._data.shape, o._data.dtype) for o in outputs], sparse, op, finish)
    for i, o in enumerate(outputs):
        o._node, o._out_idx = node, i
    if current() is None:
        for t in inputs:  # `backward` may keep their arrays until the node is freed
            if t is not None and t._node is None:
                _ownership.hold(t, node)


def set_history(tensor: Any, node: Any, out_idx: int = 0) -> None:
    """Give `tensor` the gradient history `(node, out_idx)` without telling any capture (a
    capture's own bookkeeping, like `set_data`)."""
    tensor._node, tensor._out_idx = node, out_idx


def history(tensor: Any) -> tuple[Any, int]:
    """The gradient history of `tensor`, to hand to `eager.rebind(other, value, *history)`."""
    return tensor._node, tensor._out_idx


# ----- what a capture changes on tensors, and puts back ----------------------------------------
def snapshot(tensor: Any) -> tuple:
    """What a region may change on `tensor`: storage, gradient history, `.grad`, and who else
    holds the storage. (Tracking counts are not saved: GradManagers inside a region balance
    their own.)"""
    return (tensor._data, tensor._node, tensor._out_idx, tensor._grad,
            _ownership.record(tensor))


def restore(tensor: Any, snap: tuple) -> None:
    """Put back what `snapshot(tensor)` saw."""
    tensor._data, tensor._node, tensor._out_idx, tensor._grad = snap[:4]
    _ownership.restore_record(tensor, snap[4])


def with_grad(snap: tuple, grad: Any) -> tuple:
    """`snap` (from `snapshot`) with `.grad` replaced by `grad`."""
    return (*snap[:3], grad, *snap[4:])


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
    h = current()
    for t, s in zip(targets, sources):
        if t is not None:
            if h is not None:
                h.rebind(t, s._data)
            _ownership.share(t, s)
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
    if _tape.differentiable(tensor._data.dtype):
        tensor._tracked += 1
        return True
    return False


def unmark_leaf(tensor: Any) -> None:
    """Undo the tracking `mark_leaf` added."""
    tensor._tracked -= 1


def tape_state() -> tuple[int, int]:
    """This thread's recording state (recording GradManagers, no_grad depth)."""
    return _tape.state()


def set_tape_state(state: tuple[int, int]) -> None:
    """Set this thread's recording state, e.g. to record privately during a capture."""
    _tape.set_state(state)


def leaf_dependencies(tensors: Sequence[Any]) -> list[list[Any]]:
    """For each tensor, the leaf tensors its recorded gradient history reaches."""
    return _tape.leaf_dependencies(tensors)


def ragged_length(tensor: Any) -> Any:
    """None, or the logical length of `tensor`'s ragged axis 0: an int, an int32 device scalar
    (a selection from a small source in eager code), or a traced int32 (inside a region); its
    storage is padded to a capacity (`eager/core/ragged.py`)."""
    return tensor._len


def set_ragged_length(tensor: Any, length: Any) -> None:
    """Make `tensor` (holding padded storage) ragged with logical length `length`, an int32
    device scalar: what a region that returns a data-dependent selection gives back."""
    tensor._len = length


def quantized_dtype(tensor: Any) -> Any:
    """The quantized dtype (qint8(scale), ...) of a Tensor holding integer storage, else None:
    a region's output keeps it (`set_quantized_dtype`), since the program returns the array."""
    return tensor._qdtype


def set_quantized_dtype(tensor: Any, dtype: Any) -> None:
    """Make `tensor` (holding integer storage) a quantized tensor of `dtype`."""
    _tag_quantized(tensor, dtype)
