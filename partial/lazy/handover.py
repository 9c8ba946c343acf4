"""Handing a capture over to the lazy engine at the region's first break.

The first call of a region does not know whether the region breaks (an `exclude_from_trace()`
block, a value read under `graph_breaks=True`): nothing tells before its Python runs. So it is
captured, and if a break comes, the capture does not start the call again (that would run the
Python before the break twice): it hands what it traced so far to the lazy engine (`run.py`),
which runs the rest of the call, and every later call, as it runs any region with breaks
(`breaks.py`). `Handover` is the one way in: the region's whole runner is given it when made,
and passes it to the capture as `on_break`, so the capture calls down into it once and gets the
lazy hooks back.

How it works. While capturing, every op call is logged (`op_log.py`). At the break the log is
turned into the lazy engine's first stretch, as if the ops had been recorded lazily: each tracer
an op produced becomes a `Pending` placeholder, each tracer of a Tensor argument its real array
again, and each Tensor holding a tracer the matching placeholder, with the gradient history eager
code would have given it. A tensor made from plain values (`eg.zeros`, `eg.tensor([...])`) is a
tracer to the capture too; it is made again as the real constant eager code would have made
(`OpLog.constant`). The lazy engine's hooks replace the capture's, and the rest of the region
runs on real arrays (in `jax.core.eval_context()`, since it still runs inside the capture's
trace).

The `GradManager.backward`s before the break (in an `xla_trace` step) are replayed, with what
came after each (`replay.py`). Keys by `id()` here are the log's (why they are safe: `op_log.py`).

What the log cannot describe (a custom `Function`, a tensor computed with jax directly) is
not handed over: the call then starts again lazily (`BreakFound`), with a warning.
"""

from __future__ import annotations

import functools as ft
import logging
import weakref
from typing import Any

import jax

import eager as eg
from eager.hooks import describe_location

from ..capture import Backward, ops_of
from ..messages import break_without_host, collective_with_breaks
from ..region import tensor_spec
from ..settings import Settings
from .breaks import Breaks
from .replay import hand_over_past_backward
from .run import LazyRun
from .stretch import INPUT, NO_INPUT, START, VALUE, Pending, Stretch

logger = logging.getLogger("partial")
hooks = eg.hooks
_differentiable = hooks.differentiable
_Tensor, _Tracer = eg.Tensor, jax.core.Tracer


class Plan:
    """What a capture traced so far, as the lazy engine's first stretch."""

    def __init__(self, cap: Any):
        self.cap = cap
        self.stretch = Stretch(START)
        self.values: dict[int, tuple] = {}  # id(tracer) -> (value index, history, diff)
        self.concrete: dict[int, Any] = {}  # id(constant's tracer) -> its real array

    def build(self, entries: list) -> str:
        """Turn the op calls among the log `entries` into the stretch; return why it cannot
        be, or ''."""
        for op, attrs, ins, recording, outs in ops_of(entries):
            descs = []
            tracked = False
            for x, a, needs, hist in ins:
                desc = self._input(x, a, needs, hist)
                if desc is None:
                    return f"an input of {op.name} computed outside the framework's ops"
                tracked = tracked or (desc[0] == VALUE and desc[2]) or (desc[0] == INPUT
                                                                        and needs)
                descs.append(desc)
            recorded = op.differentiable and recording and tracked
            self.stretch.records.append((op, attrs, tuple(descs), recorded))
            self.stretch.counts.append(len(outs))
            for i, (a, hist) in enumerate(outs):
                aval = jax.typeof(a)
                diff = recorded and i not in op.nondiff_outputs and _differentiable(aval.dtype)
                if isinstance(a, _Tracer):
                    self.values[id(a)] = (len(self.stretch.out_avals), hist, diff)
                self.stretch.out_avals.append(aval)
                self.stretch.nondiff.append(not diff)
        return ""

    def _find(self, a: Any) -> tuple | None:
        """What tracer `a` is: ("value", (index, history, diff), cut) for an op's output,
        ("argument", tensor, cut) for an argument's, ("constant", array, cut) for a tensor
        made from plain values (`eg.zeros`); `cut` when reached through a gradient cut
        (`detach()`), and ("constant", array, True) for the cut of a real array (a lifted
        tensor's, detached: a frozen BatchNorm's weight). None when the log does not know it."""
        cut = False
        while a is not None:
            if cut and not isinstance(a, _Tracer):
                return ("constant", a, cut)
            if (v := self.values.get(id(a))) is not None:
                return ("value", v, cut)
            if (arg := self.cap.arg_tracers.get(id(a))) is not None:
                return ("argument", arg, cut)
            if (made := self.cap.made_constants.get(id(a))) is not None:
                return ("constant", self._concrete(id(a), made[0]), cut)
            a, cut = self.cap.aliases.get(id(a)), True
        return None

    def _concrete(self, key: int, make: Any) -> Any:
        """The real array of a constant the capture made as a tracer: made again."""
        array = self.concrete.get(key)
        if array is None:
            # with no capture current, so that creation functions take their programs kept
            # with the persistent cache, not jax's primitive ones compiled in every process
            with jax.core.eval_context(), hooks.capturing(None):
                array = self.concrete[key] = make()
        return array

    def _input(self, x: Any, a: Any, needs: bool, hist: Any) -> tuple | None:
        st = self.stretch
        if isinstance(a, _Tracer):
            found = self._find(a)
            if found is None:
                return None
            kind, what, cut = found
            if kind == "value":
                return (VALUE, what[0], _attached(what, cut, hist))
            if kind == "constant":
                return (INPUT, LazyRun._array_input(st, what))
            return (INPUT, self._tensor_slot(what, self.cap.saved[id(what)][1][0], needs))
        if isinstance(x, (_Tensor, int)) and hist is not None:  # a tensor, or its id
            return (INPUT, self._tensor_slot(x, a, needs))
        if x is None:
            return NO_INPUT
        return (INPUT, LazyRun._array_input(st, x))

    def _tensor_slot(self, t: Any, a: Any, needs: bool) -> int:
        """The input slot of tensor `t` (held when it needs a gradient, else its id)."""
        st = self.stretch
        key = (t if type(t) is int else id(t), id(a), needs)
        slot = st.slot_of.get(key)
        if slot is None:
            slot = st.slot_of[key] = len(st.inputs)
            st.specs.append((tensor_spec(a), needs))
            st.avals.append(jax.typeof(a))
            st.inputs.append(a)
            st.parents.append((t, *self._eager_history(t)) if needs else None)
        return slot

    def _eager_history(self, t: Any) -> tuple:
        saved = self.cap.saved.get(id(t))
        return saved[1][1:3] if saved is not None else hooks.history(t)

    def conversions(self, later: frozenset = frozenset()) -> list | None:
        """For every live tensor the capture touched that holds a tracer: (tensor, new array,
        new history); None if one holds a tracer the stretch does not produce. Tensors holding
        an array in `later` (made after a replayed backward) are set aside in `self.later`."""
        cap = self.cap
        pending = self.pending = [Pending(aval, i) for i, aval in
                                  enumerate(self.stretch.out_avals)]
        self.later: list = []
        tensors = {id(t): t for t, _ in cap.saved.values()}
        for ref in cap.made.values():
            if (t := ref()) is not None:
                tensors[id(t)] = t
        out = []
        for t in tensors.values():
            a = hooks.data(t)
            if not isinstance(a, _Tracer):
                continue
            if id(a) in later:
                self.later.append(t)
                continue
            found = self._find(a)
            if found is None:
                return None
            kind, what, cut = found
            if kind == "value":
                p = pending[what[0]]
                out.append((t, p, (p, 0) if _attached(what, cut, hooks.history(t)) else
                            (None, 0)))
            elif kind == "constant":
                out.append((t, what, (None, 0)))
            else:
                snap = cap.saved[id(what)][1]
                out.append((t, snap[0], snap[1:3] if t is what and not cut else (None, 0)))
        return out

    def install(self, breaks: Any, conversions: list) -> LazyRun:
        """Give the tensors their placeholders or real arrays, put back what the capture
        changed only for its own sake, and return the lazy hooks holding the stretch."""
        cap = self.cap
        converted = {id(t) for t, _, _ in conversions}
        constants = {id(a) for a in self.concrete.values()}  # (held by self.concrete)
        for t in cap.marked:
            hooks.unmark_leaf(t)
        cap.marked.clear()
        run = LazyRun(breaks)
        run.stretch = self.stretch
        for t, snap in cap.saved.values():
            if id(t) in cap.mutated or id(t) in cap.grads_written:
                run.saved[id(t)] = (t, snap)  # a change of this call, undone if it fails
            if id(t) not in converted and id(t) not in cap.mutated:
                # lifted: copies, leaf marks
                hooks.restore(t, hooks.with_grad(snap, hooks.raw_grad(t)))
        lifted = {id(snap[0]): t for t, snap in cap.saved.values()}
        for t, array, (node, out_idx) in conversions:
            hooks.set_data(t, array)
            hooks.set_history(t, node, out_idx)
            if type(array) is Pending:
                self.stretch.holders.append(weakref.ref(t))
                continue
            _record_holder(t, lifted.get(id(array)))
            if id(array) in constants:  # its value may be read, as lazily
                run.constants[id(t)] = weakref.ref(t)
        for key, ref in cap.made.items():
            t = ref()
            if t is not None and key not in converted:
                run.constants[key] = ref
        (r, p), (outer_r, outer_p) = hooks.tape_state(), cap.outer_tape
        hooks.set_tape_state((outer_r + r - cap.differentiable, outer_p + p))
        return run


def _attached(value: tuple, cut: bool, history: Any) -> bool:
    """Whether a tensor with gradient `history` carries the history of the logged `value`
    (index, history it was made with, whether it is differentiated), reached through a
    gradient cut or not."""
    _, made_with, diff = value
    return diff and not cut and history == made_with


class Handover:
    """How a region comes to run with graph breaks; given to its whole-region runner
    (`compiled.WholeRegion`) when that is made, so that the runner needs no lazy engine of its
    own. Called at a capture's first break (it is the capture's `on_break`), it turns what was
    captured into the lazy engine's first stretch; `start` makes the region run lazily from
    the start of a call, when that cannot be."""

    def __init__(self, name: str, settings: Settings, cache: Any):
        self.name, self.settings, self.cache = name, settings, cache

    def __call__(self, cap: Any, what: str, where: Any) -> LazyRun | str:
        """The lazy hooks that run the rest of the call captured by `cap`, holding what it
        traced so far; or why it cannot be handed over (nothing was changed then)."""
        if self.settings.without_host:
            raise break_without_host(self.settings.kind, what, where)
        start = ft.partial(self.start, f"first found: {what} at {describe_location(where)}")
        collective = next((e[0] for e in cap.log if type(e) is tuple and e[0].per_rank), None)
        if collective is not None:
            raise collective_with_breaks(cap.kind, collective)
        if cap.unresumable:
            return f"{cap.unresumable} ran before it"
        marks = [i for i, e in enumerate(cap.log) if isinstance(e, Backward)]
        if marks:
            return hand_over_past_backward(cap, Plan(cap), marks[0], start)
        plan = Plan(cap)
        why = plan.build(cap.log)
        if why:
            return why
        conversions = plan.conversions()
        if conversions is None:
            return "a tensor holds a value computed outside the framework's ops"
        with hooks.atomic():  # a Ctrl-C must not leave tensors half converted
            return plan.install(start(), conversions)

    def start(self, first: str) -> Breaks:
        """Make `Breaks` the region's runner from now on (`first`: where it first broke)."""
        breaks = self.cache.runner = Breaks(self.name, self.settings, self.cache, first)
        logger.info("%s: `%s` breaks (%s): it runs its Python on every call, compiling the "
                    "stretches between breaks", self.settings.kind, self.name, first)
        return breaks


def _record_holder(t: Any, source: Any) -> None:
    """`t` now holds a real array: a lifted tensor's (`source`: `w.detach()` in the region),
    which the two then share, or a constant the capture made, which other tensors made from
    it may hold too. Either way a later update must not consume it unseen
    (`eager.core.ownership`)."""
    if source is None:
        hooks.hand_out(t)
    elif source is not t:
        hooks.share(t, source)
