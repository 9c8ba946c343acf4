"""Running a region with graph breaks: its Python runs on every call, ops are recorded lazily and
each stretch between breaks runs as one cached compiled segment.

How it works. `LazyRun` is installed as the capture hooks while the region's Python runs. An op
call returns Tensors holding `Pending` placeholders (shape and dtype only) and appends a record
to the current stretch: the op, its static attributes, where each input comes from (an earlier
op of the stretch, or a concrete array, which becomes an input of the segment) and whether the
eager tape would have recorded it. At a break (an `exclude_from_trace()` block, a value read
under `graph_breaks=True`, `GradManager.backward` in an `xla_trace` step, the end of the region)
the stretch is flushed: its outputs are the placeholders still held by live Tensors, the
records, input shapes and outputs form the cache key, and the segment compiled for that key
(once) runs through `autograd_bridge`, so under a recording GradManager it is one node of the
eager tape. Every Tensor holding a placeholder then receives its value, and gradient history
where the eager tape would have given it one.

Gradients follow the eager tape exactly: an op's outputs carry a gradient only if a GradManager
recorded while the op ran and one of its inputs was tracked; a Tensor that holds a placeholder
without its history (`detach()`, `rebind` without a node) passes none.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg
from eager.hooks import user_location

from ..messages import (
    backward_in_partial_trace,
    collective_with_breaks,
    function_in_region,
    value_read_error,
)
from ..region import Snapshots, invalidate_unfinished, tensor_spec
from .stretch import INPUT, NO_INPUT, START, VALUE, Pending, Stretch

logger = logging.getLogger("partial")
hooks = eg.hooks
_data, _history, _set_history, _wrap = hooks.data, hooks.history, hooks.set_history, hooks.wrap
_is_recording, _needs_grad, _snapshot = hooks.is_recording, hooks.needs_grad, hooks.snapshot
_Tensor, _differentiable = eg.Tensor, hooks.differentiable

_SCALAR_AVALS = {t: jax.typeof(t(0)) for t in (bool, int, float, complex)}


class LazyRun(hooks.CaptureHooks):
    """The hooks of one call of a region with graph breaks."""

    defers = True

    def __init__(self, breaks: Any):  # breaks.Breaks
        self.breaks = breaks
        self.stretch = Stretch(START)
        self.constants: dict[int, weakref.ref] = {}  # tensors created with a concrete value
        self.saved = Snapshots()  # tensors the call changed, as they were before it
        self.report: list = []

    # ----- recording ---------------------------------------------------------------------
    def defer(self, op: Any, attrs: tuple, inputs: Sequence) -> Any:
        if op.per_rank:
            raise collective_with_breaks(self.breaks.kind, op)
        recording = op.differentiable and _is_recording()
        if recording and any(_leaf_of_pending(x) for x in inputs):
            # Its gradient goes to the leaf, but a piece is differentiated only with respect
            # to its inputs: make the value an input of the next stretch.
            self.flush("a tensor updated in this stretch, differentiated as a leaf",
                       user_location())
        if op.resizes:
            return self._alone(op, attrs, inputs, recording)
        return self._record(op, attrs, inputs, recording)

    def _alone(self, op: Any, attrs: tuple, inputs: Sequence, recording: bool) -> Any:
        """Record `op` in a stretch of its own (`Op.resizes`): the stretch before it is keyed
        by its own inputs only, the one after it by its output's size."""
        why = f"{op.name} (its output is sized from its inputs' lengths)"
        if self.stretch.records:
            self.flush(f"before {why}", user_location())
        out = self._record(op, attrs, inputs, recording)
        self.flush(why, user_location())
        return out

    def _record(self, op: Any, attrs: tuple, inputs: Sequence, recording: bool) -> Any:
        st = self.stretch
        descs: list = []
        avals: list = []
        tracked = False
        for x in inputs:
            if isinstance(x, _Tensor):
                a = _data(x)
                if type(a) is Pending:
                    attached = _history(x)[0] is a
                    descs.append((VALUE, a.index, attached))
                    avals.append(a.aval)
                    tracked = tracked or attached
                else:
                    slot, needs = self._tensor_input(st, x, a)
                    descs.append((INPUT, slot))
                    avals.append(st.avals[slot])
                    tracked = tracked or needs
            elif x is None:
                descs.append(NO_INPUT)
                avals.append(None)
            else:
                slot = self._array_input(st, x)
                descs.append((INPUT, slot))
                avals.append(st.avals[slot])
        recorded = recording and tracked
        out_avals = self.breaks.output_avals(op, attrs, tuple(avals))
        st.records.append((op, attrs, tuple(descs), recorded))
        st.counts.append(len(out_avals))
        nondiff = op.nondiff_outputs
        outs = []
        for i, aval in enumerate(out_avals):
            p = Pending(aval, len(st.out_avals))
            st.out_avals.append(aval)
            diff = recorded and i not in nondiff and _differentiable(aval.dtype)
            st.nondiff.append(not diff)
            t = _wrap(p)
            if diff:
                _set_history(t, p, 0)
            outs.append(t)
        return tuple(outs) if op.multi_output else outs[0]

    @staticmethod
    def _tensor_input(st: Stretch, t: Any, a: Any) -> tuple[int, bool]:
        needs = _needs_grad(t)
        # By the array (which st.inputs keeps alive) and, where a gradient flows, the tensor
        # (kept in st.parents): the id of a tensor nothing keeps may be reused by the next
        # tensor reading the same array, which would merge two slots on some steps only.
        key = (id(t) if needs else None, id(a), needs)
        slot = st.slot_of.get(key)
        if slot is None:
            slot = st.slot_of[key] = len(st.inputs)
            st.specs.append((tensor_spec(a), needs))
            st.avals.append(a.aval)
            st.inputs.append(a)
            st.parents.append((t, *_history(t)) if needs else None)
        return slot, needs

    @staticmethod
    def _array_input(st: Stretch, x: Any) -> int:
        if isinstance(x, (list, tuple)):
            x = jnp.asarray(np.asarray(x))
        aval = _SCALAR_AVALS.get(type(x)) or jax.typeof(x)
        slot = len(st.inputs)
        st.specs.append((aval, False))
        st.avals.append(aval)
        st.inputs.append(x)
        st.parents.append(None)
        return slot

    # ----- the hooks ---------------------------------------------------------------------
    def created(self, t: Any) -> None:
        if type(_data(t)) is Pending:
            self.stretch.holders.append(weakref.ref(t))
        else:
            self.constants[id(t)] = weakref.ref(t)

    def constant(self, make: Any) -> Any:
        # Concrete, so made with no capture current: creation functions then take their
        # programs kept with the persistent cache, not jax's primitive ones (compiled in
        # every process: FCOS's anchors cost 24 such compiles on its first lazy call).
        with hooks.capturing(None):
            return make()

    def rebind(self, t: Any, value: Any) -> None:
        if type(_data(t)) is not Pending and not self._made_here(t):
            self.saved.save(t)  # (held until the call ends: a tensor made here would be output)
        if type(value) is Pending:
            self.stretch.holders.append(weakref.ref(t))

    def _made_here(self, t: Any) -> bool:
        """Whether `t` was made in this call (so a failure has nothing of it to put back)."""
        ref = self.constants.get(id(t))
        return ref is not None and ref() is t

    def grad_write(self, owner: Any, value: Any) -> None:
        self.saved.save(owner)

    def value_read(self, t: Any, what: str) -> None:
        pending = type(_data(t)) is Pending
        if self.breaks.graph_breaks:
            if pending:
                self.flush(what, user_location())
            return
        ref = self.constants.get(id(t))
        if not pending and ref is not None and ref() is t:
            return  # made inside the region from a concrete value
        raise value_read_error(self.breaks.kind, what)

    def function_call(self, function: Any) -> None:
        raise function_in_region(
            self.breaks.kind, function, "which has graph breaks, so its ops are recorded "
            "without a tape node for the Function", "Call it inside "
            "`with exclude_from_trace():`, where it runs eagerly, or outside the region.")

    def backward(self, manager: Any, y: Any = None, dy: Any = None) -> None:
        if self.breaks.differentiable:
            raise backward_in_partial_trace()
        self.flush("GradManager.backward()", user_location())

    def break_here(self, what: str, where: Any) -> None:
        """A break the region asked for (`exclude_from_trace()`): run what is pending."""
        self.flush(what, where)

    # ----- breaks --------------------------------------------------------------------------
    def flush(self, why: str, where: Any) -> None:
        """Run the stretch recorded so far and give every tensor holding a placeholder its
        value; start a new stretch."""
        st = self.stretch
        ordinal = len(self.report)
        site = (why, *where[:2]) if where else (why, None, None)
        if not st.records:
            self.stretch = Stretch(site)
            self.report.append((0, why, where, "no ops"))
            return
        holders, outputs = _holders(st)
        piece, cached = self.breaks.piece(st, outputs, ordinal)
        with hooks.capturing(None):
            tensors = [None if p is None else _parent(*p, a) for p, a in zip(st.parents,
                                                                             st.inputs)]
            try:
                results = piece.function(st.inputs, tensors, piece.wrt)
            except BaseException:
                if not cached:  # it compiles on its first run: do not keep a broken piece
                    self.breaks.cache.drop_piece(piece)
                raise
            for t, pos, attached in holders:
                r = results[pos]
                eg.rebind(t, r, *(_history(r) if attached else (None, 0)))
        if cached:
            self.breaks.cache.hits += 1
        self.stretch = Stretch(site)
        self.report.append((len(st.records), why, where, "cached" if cached else "compiled"))

    def abandon(self) -> None:
        """After a failure: put back every tensor and `.grad` the call's segments changed, and
        make tensors that never got a value raise on use. (What an excluded block changed
        eagerly stays, as eager code's effects do.)"""
        self.saved.restore_all()
        invalidate_unfinished([ref() for ref in self.stretch.holders],
                              lambda a: type(a) is Pending)
        self.stretch = Stretch(START)


def _leaf_of_pending(x: Any) -> bool:
    """Whether op input `x` holds a value the stretch computes but is a leaf of the tape
    (a parameter an optimizer step of this stretch updated, used again while recording)."""
    return (isinstance(x, _Tensor) and type(_data(x)) is Pending and _history(x)[0] is None
            and _needs_grad(x))


def _holders(st: Stretch) -> tuple[list, tuple]:
    """The live tensors holding a placeholder, with the output position of its value and
    whether they carry its gradient history; and the values to output, in the order they
    were computed (whatever order the tensors were found in: a stretch handed over by a
    capture is then the same piece as the one recorded lazily on the next call)."""
    found = []
    seen: set[int] = set()
    for ref in st.holders:
        t = ref()
        if t is None or id(t) in seen:
            continue
        a = _data(t)
        if type(a) is not Pending:
            continue
        seen.add(id(t))
        found.append((t, a.index, _history(t)[0] is a))
    outputs = tuple(sorted({index for _, index, _ in found}))
    position = {index: k for k, index in enumerate(outputs)}
    return [(t, position[index], attached) for t, index, attached in found], outputs


def _parent(t: Any, node: Any, out_idx: int, array: Any) -> Any:
    """The tensor standing for input `t` as the stretch read it (`array`): `t` itself for a
    leaf, else a tensor with the history `t` had then (it may have been rebound since)."""
    if node is None:
        return t
    stand_in = _wrap(array)
    _set_history(stand_in, node, out_idx)
    return stand_in
