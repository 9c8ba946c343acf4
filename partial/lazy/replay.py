"""Handing an `xla_trace` capture over at a break that comes after `gm.backward`.

The capture ran each backward on tracers, through the tape, outside the logged ops, so the
`.grad` tracers it left have no description the lazy engine could use. So the handover replays
the call up to the break the way the lazy engine runs it: the ops before the first backward
become the first stretch (`handover.Plan`), that backward runs again eagerly over it (which
runs the stretch as a compiled piece and accumulates real gradients), and everything logged
after it is done again in order on real values: ops are recorded lazily, managers start and
stop recording, and later backwards run (gradient accumulation over micro-batches, several
optimizer steps in one call). Tensors holding tracers then get the matching real arrays or
placeholders, and the lazy engine goes on from the break.

Keys by `id()` here name objects the log, the replay or its caller hold for as long as the key
is used (tracers and arrays in the log, tensors in `later` and `_Replay.touched`, constants in
`_Replay.consts`), so no id is reused while it is a key.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import jax

import eager as eg

from ..capture import Backward, GradWrite, Recording, ops_of

hooks = eg.hooks
_Tensor, _Tracer = eg.Tensor, jax.core.Tracer


def hand_over_past_backward(cap: Any, plan: Any, at: int, start_breaks: Any) -> Any:
    """`handover.hand_over` for a log whose first `Backward` is at position `at`: the lazy
    hooks, or why the call cannot be handed over (a string; nothing was changed then)."""
    first, before, after = cap.log[at], cap.log[:at], cap.log[at + 1:]
    why = plan.build(before)
    if why:
        return why
    marks = [first] + [e for e in after if isinstance(e, Backward)]
    owners = {id(a): owner for m in marks for owner, a in m.grads.values()}
    made_after = {id(a) for *_, outs in ops_of(after) for a, _ in outs}
    conversions = plan.conversions(frozenset(made_after | set(owners)))
    if conversions is None:
        return "a tensor holds a value computed outside the framework's ops"
    why = _check_after(plan, first, after)
    grads_at_first = _grads_at(cap, before, owners.values())
    if why or isinstance(grads_at_first, str):
        return why or grads_at_first
    with hooks.atomic():  # a Ctrl-C must not leave tensors half converted
        lazy = plan.install(start_breaks(), conversions)
    cap.lazy = lazy
    hooks.hand_over(lazy)
    later = plan.later
    at_break = [(t, hooks.data(t), hooks.history(t)) for t in later]
    for t in later:  # as at the backward: pre-existing tensors held their values from before
        saved = cap.saved.get(id(t))
        if saved is not None:
            hooks.set_data(t, saved[1][0])
    for owner, grad in grads_at_first.values():
        hooks.restore(owner, hooks.with_grad(hooks.snapshot(owner), grad))
    _restart_recording(after)
    replay = _Replay(plan, lazy, _values_needed(plan, after))
    first.manager.record()
    first.manager.backward(first.y, first.dy)  # runs the first stretch, accumulates grads
    replay.took(first)
    for entry in after:
        replay.redo(entry)
    replay.finish(at_break)
    return lazy


def _check_after(plan: Any, first: Backward, after: list) -> str:
    """Why what was logged after the first backward cannot be done again, or ''."""
    known = {id(a) for _, a in first.grads.values()}  # values the replay will have made
    for entry in after:
        if isinstance(entry, Backward):
            if any(id(a) not in known for _, a, _ in entry.ys):
                return "a GradManager.backward of a value computed before an earlier one"
            if any(isinstance(a, _Tracer) and id(a) not in known and plan._find(a) is None
                   for _, a, _ in entry.dys):
                return "a gradient passed to GradManager.backward computed outside the ops"
            known.update(id(a) for _, a in entry.grads.values())
        elif isinstance(entry, GradWrite):
            a = entry.array
            if isinstance(a, _Tracer) and id(a) not in known and plan._find(a) is None:
                return "a .grad set to a value computed outside the framework's ops"
        elif type(entry) is tuple:
            op, _, ins, _, outs = entry
            for _, a, _, _ in ins:
                if isinstance(a, _Tracer) and id(a) not in known and plan._find(a) is None:
                    return f"an input of {op.name} computed outside the framework's ops"
            known.update(id(a) for a, _ in outs)
    return ""


def _grads_at(cap: Any, before: list, owners: Any) -> dict | str:
    """The `.grad` of each owner the replay sets as it was at the first backward (id(owner)
    -> (owner, grad)); or why it cannot be known."""
    grads = {id(o): (o, cap.saved[id(o)][1][3]) for o in owners}  # as before the call
    for entry in before:
        if isinstance(entry, GradWrite):
            value = entry.value  # converted with the other tensors at the handover
            if value is not None and hooks.data(value) is not entry.array:
                return "a .grad set to a tensor that changed before GradManager.backward"
            grads[id(entry.owner)] = (entry.owner, value)
    return grads


def _restart_recording(after: list) -> None:
    """Put each manager that starts or stops recording after the first backward back in the
    state it had then (the replay takes it through its changes again). A backward ends by
    stopping its manager."""
    events: dict[int, list] = {}
    for entry in after:
        if isinstance(entry, (Recording, Backward)):
            events.setdefault(id(entry.manager), []).append(entry)
    for entries in events.values():
        first, last = entries[0], entries[-1]
        then = first.on is False if isinstance(first, Recording) else True
        now = last.on if isinstance(last, Recording) else False
        if then and not now:
            first.manager.record()
        elif now and not then:
            first.manager.release()


def _values_needed(plan: Any, after: list) -> set:
    """The values of the first stretch read by what was logged after the backward."""
    arrays = [a for *_, ins, _, _ in ops_of(after) for _, a, _, _ in ins]
    arrays += [a for e in after if isinstance(e, Backward) for _, a, _ in e.dys]
    needed = set()
    for a in arrays:
        if isinstance(a, _Tracer):
            found = plan._find(a)
            if found is not None and found[0] == "value":
                needed.add(found[1][0])
    return needed


class _Replay:
    """Doing again, on real values, what a capture logged after its first backward."""

    def __init__(self, plan: Any, lazy: Any, needed: set):
        self.plan, self.lazy = plan, lazy
        self.holders = {i: hooks.wrap(plan.pending[i]) for i in needed}  # first piece's values
        self.made: dict[int, Any] = {}  # id(tracer) -> the Tensor made again for it
        self.grads: dict[int, Any] = {}  # id(gradient tracer) -> the real `.grad` Tensor
        self.consts: dict[int, Any] = {}  # id(array) -> a Tensor wrapping it
        self.touched: dict[int, tuple] = {}  # id(tensor) -> (tensor, data, history) before

    def took(self, mark: Backward) -> None:
        """After replaying backward `mark`: the gradients it stands for."""
        self.grads.update({id(a): owner.grad for owner, a in mark.grads.values()})

    def redo(self, entry: Any) -> None:
        if isinstance(entry, Recording):
            entry.manager.record() if entry.on else entry.manager.release()
        elif isinstance(entry, GradWrite):
            value = entry.value
            entry.owner.grad = None if value is None else self.value(id(value), entry.array,
                                                                     (None, 0))
        elif isinstance(entry, Backward):
            ys = [self.value(id(t), a, h) for t, a, h in entry.ys]
            dys = [self.value(id(t), a, h) for t, a, h in entry.dys]
            entry.manager.backward(_as_given(entry.y, ys), _as_given(entry.dy, dys))
            self.took(entry)
        else:
            op, attrs, ins, recording, outs = entry
            inputs = [x if hist is None else self.value(x, a, hist) for x, a, _, hist in ins]
            with contextlib.nullcontext() if recording else eg.no_grad():
                result = self.lazy.defer(op, attrs, tuple(inputs))
            for (a, hist), t in zip(outs, result if op.multi_output else (result,)):
                self.made[id(a)] = (t, hist)

    def value(self, x: Any, a: Any, history: tuple) -> Any:
        """The Tensor an input logged as tensor (or id) `x` holding array `a` with gradient
        `history` reads now. A held tensor (a leaf that needs a gradient) is read itself,
        holding that value, so that its gradient reaches it."""
        if not isinstance(a, _Tracer):
            if isinstance(x, _Tensor) and hooks.data(x) is a:
                return x
            v = self._const(a)
        elif id(a) in self.made:
            v, made_with = self.made[id(a)]
            if history != made_with and hooks.history(v)[0] is not None and \
                    not isinstance(x, _Tensor):
                return v.detach()  # read through a gradient cut (`detach()`)
        elif id(a) in self.grads:
            v = self.grads[id(a)]
        else:
            kind, what, cut = self.plan._find(a)
            v = self.holders[what[0]] if kind == "value" else what
            if kind == "constant":
                v = self._const(what)
            if cut:
                return v.detach()
        if isinstance(x, _Tensor) and v is not x:
            self._hold(x, v)
            return x
        return v

    def _const(self, array: Any) -> Any:
        t = self.consts.get(id(array))
        if t is None:
            t = self.consts[id(array)] = hooks.wrap(array)
        return t

    def _hold(self, t: Any, v: Any) -> None:
        if id(t) not in self.touched:
            self.touched[id(t)] = (t, hooks.data(t), hooks.history(t))
        hooks.set_data(t, hooks.data(v))
        hooks.set_history(t, None, 0)  # held tensors are leaves
        self.lazy.stretch.holders.append(weakref.ref(t))

    def finish(self, at_break: list) -> None:
        """Give each tensor that held a tracer made after the first backward (`at_break`:
        (tensor, that tracer, its gradient history)) its value."""
        for t, data, history in self.touched.values():
            hooks.set_data(t, data)
            hooks.set_history(t, *history)
        for t, a, history in at_break:
            if id(a) in self.made:
                out, made_with = self.made[id(a)]
                hooks.set_data(t, hooks.data(out))
                hooks.set_history(t, *(hooks.history(out) if history == made_with
                                       else (None, 0)))
            else:  # (an accumulated gradient may be pending too)
                g = self.grads[id(a)]
                hooks.set_data(t, None if g is None else hooks.data(g))
                hooks.set_history(t, None, 0)
            self.lazy.stretch.holders.append(weakref.ref(t))


def _as_given(given: Any, tensors: list) -> Any:
    """`tensors` in the structure `given` had (a Tensor, a sequence, or None/raw values)."""
    if isinstance(given, _Tensor):
        return tensors[0]
    if isinstance(given, (list, tuple)):
        it = iter(tensors)
        return [next(it) if isinstance(g, _Tensor) else g for g in given]
    return given
