"""`Entry`: one compiled specialization of a traced function, and its per-call work.

A call gathers the inputs (the Tensor arguments, then every lifted tensor, `.grad` slot and
hyper-parameter read afresh), checks the guards that are not part of the key, runs the segment
(through `autograd_bridge`, which records the grad node when one is needed), then writes back
every effect of the region and rebuilds the output structure.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

import eager as eg
from xla_segments import store_for_program

from ..capture import Program
from ..errors import NotDifferentiableError
from ..region import (
    Call,
    GradPresenceGuard,
    GradSlot,
    Held,
    Hyper,
    Lifted,
    ManagerGuard,
    ModuleGuard,
    OptimizerGuard,
    OptimizerStateGuard,
    Rebind,
    Result,
    take_value,
)
from .segment import compiled_segment

hooks = eg.hooks
_data, _deref, _sole = hooks.data, hooks.deref, hooks.sole
_wrap, _is_recording, _assign = hooks.wrap, hooks.is_recording, hooks.assign
_atomic = hooks.atomic

MISS = object()  # returned by `Entry.run` when the entry cannot serve the call after all


def refuse_outer_gradients(tensors: Sequence) -> None:
    """Raise when an xla_trace step would be differentiated from outside."""
    if any(t is not None and hooks.needs_grad(t) for t in tensors):
        raise NotDifferentiableError(
            "an xla_trace function is a whole training step and cannot be differentiated from "
            "outside, but it was called while a GradManager records with one of the tensors it "
            "reads attached. Call it outside `with gm:`, or compile just the forward part with "
            "partial_trace, which joins the outer GradManager's tape.")


def _pinned(program: Program, ref_writes: list, position: dict) -> Any:
    """The program's function, with each result written back into a lifted tensor laid out
    over a mesh constrained to that tensor's layout: XLA then inserts the gathers or
    scatters inside the step, and the tensor keeps the layout it was given (an update from a
    sharded gradient would otherwise come out sharded into a replicated parameter)."""
    fn = program.function()
    if program.per_rank is not None:
        return fn
    pins = []
    for ref, r in ref_writes:
        i = position.get(id(ref()))
        sharding = None if i is None else program.in_avals[i].sharding
        if isinstance(sharding, NamedSharding) and sharding.num_devices > 1:
            pins.append((r, sharding))
    if not pins:
        return fn

    def pinned(*args: Any) -> list:
        outs = list(fn(*args))
        for r, sharding in pins:
            outs[r] = jax.lax.with_sharding_constraint(outs[r], sharding)
        return outs

    pinned.__name__ = getattr(fn, "__name__", "program")
    return pinned


class Entry:
    """A captured program compiled for one guard key, with the guards it was captured under."""

    def __init__(self, key: tuple, program: Program, call: Call, name: str, *,
                 differentiable: bool = True, donate: bool = False, deaths: list | None = None,
                 finisher: Any = None, remat: bool | str = False):
        self.key = key
        self.program = program
        self.differentiable = differentiable
        # Sources come grouped: lifted tensors, then .grad slots, then hyper-parameters.
        self.refs = [s.ref for s in program.sources if isinstance(s, Lifted)]
        self.grads = [s.owner for s in program.sources if isinstance(s, GradSlot)]
        self.hypers = [s for s in program.sources if isinstance(s, Hyper)]
        self.no_hypers = [None] * len(self.hypers)
        # Results written into tensors held by reference (BatchNorm statistics, the RNG key,
        # optimizer state) go in one batch; the other effects one by one.
        batched = [(w, w.target.ref, w.value.index) for w in program.writes
                   if isinstance(w, Rebind) and isinstance(w.target, Held)
                   and isinstance(w.value, Result)]
        self.ref_writes = [(ref, index) for _, ref, index in batched]
        self.writes = [w for w in program.writes if not any(w is b for b, _, _ in batched)]
        # Donated: the buffers of lifted tensors the program rebinds (parameters, optimizer
        # state, statistics, the RNG key), which it then updates in place.
        position = {id(ref()): program.n_args + i for i, ref in enumerate(self.refs)}
        # (Not per rank: its executables run on global views of the ranks' own buffers.)
        donate = donate and program.per_rank is None
        self.donated = tuple(sorted(
            position[id(dest())] for dest, _ in self.ref_writes
            if donate and dest() is not None and id(dest()) in position))
        self.copies = 0  # donated buffers that were shared and had to be copied first
        self.function = compiled_segment(
            _pinned(program, self.ref_writes, position), program.in_avals, name, program.deps,
            store_for_program(program), finisher=finisher, donate=self.donated,
            per_rank=program.per_rank, remat=remat)
        self.segment = self.function.segment
        self.conv_rewrites = eg.conv_rewrites()
        self.out_leaves = program.out_leaves
        self.out_treedef = program.out_treedef
        self.single_result = (jax.tree_util.treedef_is_leaf(program.out_treedef)
                              and program.out_treedef.num_leaves == 1
                              and isinstance(program.out_leaves[0], Result)
                              and program.out_leaves[0].length is None
                              and program.out_leaves[0].qdtype is None
                              and not self.writes)
        self.arg_guard = program.arg_guard
        guards: list = [ModuleGuard(ref(), exclude) for ref, exclude in program.modules
                        if ref() is not None]
        for ref, inputs, state in program.optimizers:
            guards += [OptimizerGuard(ref(), inputs), OptimizerStateGuard(ref(), state)]
        guards += [GradPresenceGuard(ref(), had) for ref, had in program.grad_presence]
        guards += [ManagerGuard(ref()) for ref in program.managers if ref() is not None]
        self.guards = guards
        self.structural = [g for g in guards if g.structural]
        self.per_call = [g for g in guards if not g.structural]
        # As of before the capture: the next call re-validates what the capture itself changed.
        self.epoch = program.epoch
        self.settle = program.settle
        self.dead = False  # set when an object it depends on dies; the cache then drops it
        self.watched = self._watch(call.objects, program.sources,
                                   [] if deaths is None else deaths)

    def _watch(self, objects: list, sources: list, deaths: list) -> list:
        """Weak references whose death kills this entry: Module and Optimizer arguments, lifted
        tensors and owners of `.grad` slots. The callback only marks it and appends it to
        `deaths` (the cache's list, emptied at its next lookup): it may run in the middle of
        any code, in any thread."""
        me = weakref.ref(self)

        def died(_: Any) -> None:
            e = me()
            if e is not None and not e.dead:
                e.dead = True
                deaths.append(me)

        refs = [weakref.ref(o, died) for o in objects]
        for s in sources:
            target = s.target()
            if target is not None:
                refs.append(weakref.ref(target, died))
        return refs

    @property
    def seconds(self) -> float:
        """Capture plus compile time spent on this entry so far."""
        return self.program.seconds + self.segment.compile_seconds

    # ----- guards --------------------------------------------------------------------------
    def check(self, call: Call) -> str | None:
        """None when this entry can serve `call`; otherwise what differs."""
        if self.dead:
            return "an object the region depends on no longer exists"
        now = hooks.epoch()
        if not self.per_call and self.epoch == now and not self.arg_guard.any_state(call.tensors):
            return None
        reason = self.arg_guard.check_call(call.tensors)
        if reason:
            return reason
        if self.epoch != now:
            if self.conv_rewrites != eg.conv_rewrites():  # switched: compile anew
                return "the convolution rewrites were switched (eager.set_conv_rewrites)"
            for guard in self.structural:
                reason = guard.check()
                if reason:
                    return reason
            self.epoch = now
        for guard in self.per_call:
            reason = guard.check()
            if reason:
                return reason
        return None

    # ----- a call --------------------------------------------------------------------------
    def run(self, call: Call) -> Any:
        """Run the program for `call` and return the region's outputs, or `MISS`.

        From the dispatch (which may donate buffers) to the last write-back the call is a
        commit: a Ctrl-C then takes effect after it, so state is as after the call."""
        recording = _is_recording()
        inputs = self.inputs(call, recording or bool(self.donated))
        if inputs is None:
            return MISS
        arrays, tensors = inputs
        if recording and not self.differentiable:
            refuse_outer_gradients(tensors)
            recording = False
        with _atomic():
            if self.donated:
                self._unshare(arrays, tensors)
            try:
                if recording:
                    outs = self.function(arrays, tensors)
                else:  # the bridge's inference path, without its checks
                    outs = self.function.infer(arrays)
            except (TypeError, ValueError):
                if self._inputs_moved(arrays):  # a lifted tensor changed: capture anew
                    return MISS
                raise
            return self._commit(outs, call)

    def _commit(self, outs: list, call: Call) -> Any:
        """Write the results back into the tensors the region updated; build the outputs."""
        if self.settle:
            self._settle(outs)
        if self.ref_writes:
            _assign([ref() for ref, _ in self.ref_writes], [outs[r] for _, r in self.ref_writes])
        if self.single_result:
            return outs[0]
        for effect in self.writes:
            effect.apply(outs, call)
        leaves = [leaf.get(outs, call) for leaf in self.out_leaves]
        return self.out_treedef.unflatten(leaves)

    def _inputs_moved(self, arrays: list) -> bool:
        """Whether an input no longer has the shape, dtype or placement it was compiled for
        (a lifted tensor was rebound to another shape, or moved to another device)."""
        for a, want in zip(arrays, self.program.in_avals):
            if (a.shape, a.dtype) != (want.shape, want.dtype) or (
                    want.sharding is not None and getattr(a, "sharding", None) != want.sharding):
                return True
        return False

    def _unshare(self, arrays: list, tensors: Sequence) -> None:
        """Copy each buffer about to be donated that something else still holds (another
        Tensor after `detach()`, a raw array the user kept, a recorded tape node: the
        record `eager.core.ownership` keeps), so that donation destroys only what this call
        replaces."""
        for i in self.donated:
            if not _sole(tensors[i]):
                arrays[i] = jnp.array(arrays[i], copy=True)
                self.copies += 1

    def _settle(self, outs: list) -> None:
        """First call: the Tensors the capture created hold tracers; give the ones still alive
        their values and history, and use them as the results, so no tracer leaks."""
        for ref, r in self.settle:
            t = ref()
            if t is not None:
                take_value(t, outs[r])
                outs[r] = t
        self.settle = []

    def inputs(self, call: Call, tensors_too: bool = True) -> tuple[list, Sequence] | None:
        """(arrays, tensors) of every input: arguments, lifted tensors, `.grad` slots,
        hyper-parameters; None when one of them is gone. The Tensors (which the bridge needs
        to record a node) only when `tensors_too` (else maybe none)."""
        found = _deref(self.refs)
        if found is None:
            return None
        arrays = call.arrays + found[1]
        if not (self.grads or self.hypers):
            return arrays, call.tensors + found[0] if tensors_too else ()
        tensors = call.tensors + found[0]
        if self.grads:
            grads = [None if o is None else o.grad for o in (ref() for ref in self.grads)]
            for g in grads:
                if g is None:
                    return None
            tensors += grads
            arrays += [_data(g) for g in grads]
        if self.hypers:
            values = self._hyper_arrays()
            if values is None:
                return None
            arrays += values
            tensors += self.no_hypers
        return arrays, tensors

    def _hyper_arrays(self) -> list | None:
        """The current hyper-parameters as arrays (made anew only when a value changed)."""
        arrays = [h.array() for h in self.hypers]
        return None if any(a is None for a in arrays) else arrays


__all__ = ["Entry", "MISS"]
