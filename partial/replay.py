"""Handing an `xla_trace` capture over at a break that comes after `gm.backward`.

The capture ran the backward on tracers, through the tape, outside the logged ops, so the
`.grad` tracers it left have no description the lazy engine could use. So the handover replays
the call up to the break the way the lazy engine runs it: the ops before the backward become
the first stretch (`handover.Plan`), the backward runs again eagerly over it (which runs that
stretch as a compiled piece and accumulates real gradients), and the ops logged after the
backward are recorded again lazily on the real gradients. Tensors holding tracers then get the
matching real arrays or placeholders, and the lazy engine goes on from the break.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax

import eager as eg

hooks = eg.hooks
_Tensor, _Tracer = eg.Tensor, jax.core.Tracer


class Backward:
    """A log entry: the capture of an `xla_trace` step ran `manager.backward(y, dy)`, which
    set the `.grad` arrays in `grads` (id(owner) -> (owner, array))."""

    def __init__(self, manager: Any, y: Any, dy: Any):
        self.manager, self.y, self.dy = manager, y, dy
        self.grads: dict[int, tuple] = {}


def hand_over_past_backward(cap: Any, plan: Any, at: int, start_breaks: Any) -> Any:
    """`handover.hand_over` for a log with a `Backward` at position `at`: the lazy hooks, or
    why the call cannot be handed over (a string; nothing was changed then)."""
    mark, before, after = cap.log[at], cap.log[:at], cap.log[at + 1:]
    why = plan.build(before)
    if why:
        return why
    grads = {id(a): owner for owner, a in mark.grads.values()}
    made_after = {id(a) for *_, outs in after for a, _ in outs}
    conversions = plan.conversions(frozenset(made_after | set(grads)))
    if conversions is None:
        return "a tensor holds a value computed outside the framework's ops"
    why = _check_after(plan, after, made_after, grads)
    if why:
        return why
    with hooks.atomic():  # a Ctrl-C must not leave tensors half converted
        lazy = plan.install(start_breaks(), conversions)
    cap.lazy = lazy
    hooks.hand_over(lazy)
    later = plan.later
    originals = {id(t): hooks.data(t) for t in later}
    for t in later:  # as at the backward: pre-existing tensors held their values from before
        saved = cap.saved.get(id(t))
        if saved is not None:
            hooks.set_data(t, saved[1][0])
    for owner, _ in mark.grads.values():
        hooks.restore(owner, (*hooks.snapshot(owner)[:3], cap.saved[id(owner)][1][3]))
    needed = _values_needed(plan, after)
    holders = {i: hooks.wrap(plan.pending[i]) for i in needed}  # outputs of the first piece
    mark.manager.record()
    mark.manager.backward(mark.y, mark.dy)  # runs the first stretch, accumulates real grads
    new_grads = {key: owner.grad for key, owner in grads.items()}
    made = _record_after(plan, lazy, after, holders, new_grads)
    for t in later:
        a = originals[id(t)]
        if id(a) in made:
            out = made[id(a)]
            hooks.set_data(t, hooks.data(out))
            hooks.set_history(t, *hooks.history(out))
            lazy.stretch.holders.append(weakref.ref(t))
        else:
            g = new_grads[id(a)]
            hooks.set_data(t, None if g is None else hooks.data(g))
            hooks.set_history(t, None, 0)
    return lazy


def _check_after(plan: Any, after: list, made_after: set, grads: dict) -> str:
    """Why the ops after the backward cannot be recorded again, or ''."""
    for op, _, ins, recording, _ in after:
        if recording:
            return f"{op.name} recorded gradients after GradManager.backward"
        for _, a, _, _ in ins:
            if isinstance(a, _Tracer) and id(a) not in made_after and id(a) not in grads \
                    and plan._find(a) is None:
                return f"an input of {op.name} computed outside the framework's ops"
    return ""


def _values_needed(plan: Any, after: list) -> set:
    """The values of the first stretch the ops after the backward read."""
    needed = set()
    for *_, ins, _, _ in after:
        for _, a, _, _ in ins:
            if isinstance(a, _Tracer):
                found = plan._find(a)
                if found is not None and found[0] == "value":
                    needed.add(found[1][0])
    return needed


def _record_after(plan: Any, lazy: Any, after: list, holders: dict, grads: dict) -> dict:
    """Record the ops logged after the backward again, lazily, on real values; return the
    Tensors they made, by the id of the tracer each stands for."""
    made: dict[int, Any] = {}
    wrapped: dict[int, Any] = {}
    for op, attrs, ins, _, outs in after:
        inputs = [_input(plan, x, a, hist, made, grads, holders, wrapped)
                  for x, a, _, hist in ins]
        result = lazy.defer(op, attrs, tuple(inputs))
        results = result if op.multi_output else (result,)
        for (a, _), t in zip(outs, results):
            made[id(a)] = t
    return made


def _input(plan: Any, x: Any, a: Any, hist: Any, made: dict, grads: dict, holders: dict,
           wrapped: dict) -> Any:
    """What an op logged after the backward reads, as a real Tensor (or placeholder)."""
    if hist is None:  # not a tensor
        return x
    if not isinstance(a, _Tracer):
        t = wrapped.get(id(a))
        if t is None:
            t = wrapped[id(a)] = hooks.wrap(a)
        return t
    if id(a) in made:
        return made[id(a)]
    if id(a) in grads:
        return grads[id(a)]
    kind, what, cut = plan._find(a)
    t = holders[what[0]] if kind == "value" else what
    return t.detach() if cut else t
