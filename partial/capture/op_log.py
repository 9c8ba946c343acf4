"""The op log of a capture: every op call, `GradManager.backward`, recording switch and `.grad`
write a region makes while it is captured, for a handover at its first break (the lazy engine's
`handover.py`, reached through the capture's `on_break`).

Each op call is logged with its inputs, outputs and whether eager code would have recorded it
(`OpLog.applied`); a tensor made from plain values (`eg.zeros`, `eg.tensor([...])`) is logged
with how to make it again (`OpLog.constant`). An `xla_trace` step's backwards, recording
switches and `.grad` writes are logged as the entries defined here (`Backward`, `Recording`,
`GradWrite`), which a handover past a backward replays (the lazy engine's `replay.py`). The log
stops once a handover could no longer describe the call (`unresumable`) or when nothing can
take it over.

Keys by `id()` here are safe only because the object is alive as long as the key is used: the
log holds every tracer and array it names until the capture forgets it, `Capture.keep` the
argument and gradient-cut tracers and `Capture.made_constants` the constants' tracers. The one
exception is an op input tensor that needs no gradient, logged by id only (so the log keeps no
temporaries alive): its slot key pairs that id with the id of the array it held, which the log
keeps, so a reused id can only merge two slots of the same array.
"""

from __future__ import annotations

from typing import Any

import jax

import eager as eg

from ..messages import updated_leaf_in_partial_trace
from .state import CaptureState

hooks = eg.hooks
_data, _differentiable = hooks.data, hooks.differentiable
_Tensor, _Tracer = eg.Tensor, jax.core.Tracer


class OpLog(CaptureState):
    """The part of `Capture` that logs every op call, for a handover at a break."""

    log: list  # every op call, backward, recording switch and `.grad` write
    logged_outputs: set[int]  # ids of the arrays logged ops produced
    unresumable: str  # why the log cannot be handed over, once it cannot
    in_backward: Backward | None  # the log's mark of the GradManager.backward running now
    made_constants: dict[int, tuple]  # id(tracer) -> (make, tracer): handover

    def applied(self, op: Any, attrs: tuple, inputs: tuple, arrays: list,
                outputs: tuple) -> None:
        if self.differentiable and self.mutated and op.differentiable:
            self._refuse_updated_leaves(inputs)
        if not self._resumable() or self.in_backward is not None:
            return  # (a replayed backward runs its own ops again)
        recording = self.eager_recording()
        ins = tuple(self._logged(x, a, recording) for x, a in zip(inputs, arrays))
        self.log.append((op, attrs, ins, recording,
                         tuple((_data(o), hooks.history(o)) for o in outputs)))
        self.logged_outputs.update(id(_data(o)) for o in outputs)

    def _resumable(self) -> bool:
        """Whether a break could still hand this capture over (so the log must go on)."""
        return not self.unresumable and self.on_break is not None

    def _refuse_updated_leaves(self, inputs: tuple) -> None:
        recording = self.eager_recording()
        for x in inputs:
            if (isinstance(x, _Tensor) and id(x) in self.mutated and x._node is None
                    and self.eager_needs(x, recording)):
                raise updated_leaf_in_partial_trace(x)

    def constant(self, make: Any) -> Any:
        a = make()
        if isinstance(a, _Tracer) and self._resumable():
            self.made_constants[id(a)] = (make, a)  # (holding the tracer keeps its id its own)
        return a

    def log_backward(self, manager: Any, y: Any, dy: Any) -> None:
        """An `xla_trace` step runs `manager.backward(y, dy)`: a handover after it replays it
        (`replay.py`)."""
        if self.differentiable or not self._resumable():
            return
        self.in_backward = Backward(manager, y, dy)
        self.log.append(self.in_backward)

    def log_recording(self, manager: Any, on: bool) -> None:
        """`manager` started or stopped recording: a replayed backward needs it (the stop
        that ends a backward is part of that backward)."""
        if self.differentiable or not self._resumable():
            return
        if self.in_backward is not None and not on and self.in_backward.manager is manager:
            self.in_backward = None
        elif self.in_backward is not None:
            self.unresumable = "a GradManager recording inside GradManager.backward"
        else:
            self.log.append(Recording(manager, on))

    def log_grad_write(self, owner: Any, value: Any) -> None:
        """A `.grad` set: by the backward running now (to a gradient it computed), or by the
        step itself (`opt.clear_grad()`), which a replayed backward must see."""
        if self.differentiable or not self._resumable():
            return
        if self.in_backward is None:
            self.log.append(GradWrite(owner, value))
            return
        a = _data(value) if isinstance(value, _Tensor) else None
        if isinstance(a, _Tracer) and id(a) not in self.logged_outputs:
            self.in_backward.grads[id(owner)] = (owner, a)

    def _logged(self, x: Any, a: Any, recording: bool) -> tuple:
        """An op input as the log keeps it: (tensor or its id, array, needs, history). Only a
        tensor that needs a gradient and holds a real array, or is a leaf of the tape, is held
        (a replay must send gradients to that very tensor); the log must not keep temporaries
        alive, and finds them through their arrays."""
        if not isinstance(x, _Tensor):
            return (x, x, False, None)
        needs = self.eager_needs(x, recording)
        history = hooks.history(x)
        held = needs and (not isinstance(a, _Tracer) or history[0] is None)
        return (x if held else id(x), a, needs, history)

    def eager_recording(self) -> bool:
        """Whether eager code would record an op now (the capture of a partial_trace region
        records privately, one level above what the code outside set)."""
        r, p = hooks.tape_state()
        outer_r, outer_p = self.outer_tape
        return outer_r + r - self.differentiable > 0 and outer_p + p == 0

    def eager_needs(self, t: Any, recording: bool) -> bool:
        """Whether eager code would send a gradient to `t` from an op recorded now."""
        if not recording or not _differentiable(_data(t).dtype):
            return False
        node = self.saved[id(t)][1][1] if id(t) in self.saved and id(t) not in self.mutated \
            else t._node
        return node is not None or t._tracked - (id(t) in self.marked_ids) > 0


# ----- the log entries besides op calls (tuples: op, attrs, inputs, recording, outputs)

class Backward:
    """A log entry: the capture of an `xla_trace` step ran `manager.backward(y, dy)`, which
    set the `.grad` arrays in `grads` (id(owner) -> (owner, array))."""

    def __init__(self, manager: Any, y: Any, dy: Any):
        self.manager, self.y, self.dy = manager, y, dy
        # As they were at the call: (tensor, array, gradient history).
        self.ys = [(t, hooks.data(t), hooks.history(t)) for t in _listed(y)]
        self.dys = [(t, hooks.data(t), hooks.history(t)) for t in _listed(dy)]
        self.grads: dict[int, tuple] = {}


class Recording:
    """A log entry: `manager` started (`on`) or stopped recording."""

    def __init__(self, manager: Any, on: bool):
        self.manager, self.on = manager, on


class GradWrite:
    """A log entry: the step set `owner.grad` to `value` (a Tensor or None) itself."""

    def __init__(self, owner: Any, value: Any):
        self.owner, self.value = owner, value
        self.array = None if value is None else hooks.data(value)


def ops_of(entries: list) -> list:
    """The op calls among log entries."""
    return [e for e in entries if type(e) is tuple]


def _listed(x: Any) -> list:
    return [t for t in (x if isinstance(x, (list, tuple)) else [x]) if isinstance(t, _Tensor)]
