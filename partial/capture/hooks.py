"""`Capture`: the eager hooks installed while a region's Python runs once on tracer-backed
tensors (`capture()` in `run.py`), which turn it into a pure function over arrays, plus what is
needed to call that function again on fresh state.

How it works. The region runs inside `jax.make_jaxpr` with the hooks of `eager.hooks`
installed. Tensor arguments hold the trace's input tracers. Every other tensor that existed
before the call and that an op reads (module parameters and buffers, closure and global tensors,
the RNG key, optimizer state, `.grad` slots) keeps its concrete array, which jax records as a
constant of the program; the constant is mapped back to its Tensor by identity and becomes an
input too, read afresh at every call. Optimizer hyper-parameters are materialized as fresh 0-d
arrays, so they become inputs the same way. Every rebind of a pre-existing tensor, `.grad` write,
module attribute write and tensor created in the region that outlives it becomes an output,
written back after each call. Everything the capture changed is restored before it returns,
whether it succeeded or not: the region's effects come from running the compiled program.

A region that breaks (an `exclude_from_trace()` block, a value read under `graph_breaks=True`)
cannot be one program: at its first break the capture hands what it traced so far to the lazy
engine, which finishes the call. The capture is given the callback that does it (`on_break`:
the lazy engine's `Handover`) and calls it once, at the first break, with the op log
(`op_log.py`); it gets the lazy hooks back and installs them. `capture()` then raises
`HandedOver` with the call's result, or `BreakFound` where the call cannot be handed over.

For `partial_trace` the capture records gradients privately, every input being a leaf that needs
one, so that (a) the program cuts gradients exactly where the eager tape would (`no_grad`,
`detach`, non-differentiable ops) and (b) each output knows which inputs it depends on.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg
import eager.module as M
from eager.hooks import describe_location, user_location

from ..errors import ModuleRebindError, UnsupportedInRegionError
from ..messages import backward_in_partial_trace, function_in_region, value_read_error
from ..region import (
    GradSlot,
    Hyper,
    Lifted,
    Snapshots,
    Source,
    invalidate_unfinished,
    optimizer_state_signature,
)
from .op_log import OpLog
from .outputs import Outputs

hooks = eg.hooks
_data = hooks.data
_Tensor, _Module = eg.Tensor, M.Module


class BreakFound(BaseException):
    """Raised out of a capture at the region's first break (an `exclude_from_trace()` block,
    or a value read under `graph_breaks=True`) when the rest of the call cannot be handed over
    to the lazy engine (`why`): the call must be run again lazily. A BaseException, so user
    code catching Exception does not swallow it."""

    def __init__(self, what: str, where: Any, why: str):
        super().__init__(what)
        self.what, self.where, self.why = what, where, why


class HandedOver(BaseException):
    """Raised out of a capture whose region met a break and finished lazily: the call is done,
    `out` is what the region returned and `report` how its stretches ran."""

    def __init__(self, out: Any, report: list):
        super().__init__("handed over")
        self.out, self.report = out, report


class Capture(OpLog, Outputs, hooks.CaptureHooks):
    """The hooks installed while a region runs once under `jax.make_jaxpr`. (The end of the
    region is classified by `Outputs`; op calls are logged by `OpLog`, for a handover at a
    break.)"""

    def __init__(self, kind: str, differentiable: bool, graph_breaks: bool = False,
                 on_break: Callable | None = None, outer_tape: tuple[int, int] = (0, 0)):
        # The attributes OpLog and Outputs read too are declared, with what each holds, in
        # `CaptureState` (state.py); they are only given their first values here.
        self.kind = kind
        self.differentiable = differentiable
        self.graph_breaks = graph_breaks
        # a boolean selection stays traced (fixed capacity, traced length) unless the region
        # may break, where reading the mask breaks the graph and the rest runs eagerly
        self.traced_lengths = not graph_breaks
        self.on_break = on_break
        self.outer_tape = outer_tape
        self.log = []
        self.logged_outputs = set()
        self.unresumable = ""
        self.in_backward = None
        self.arg_tracers: dict[int, Any] = {}  # id(argument tracer) -> argument Tensor
        self.aliases: dict[int, Any] = {}  # id(gradient-cut tracer) -> the tracer it cuts
        self.made_constants = {}
        self.marked_ids = set()
        self.lazy: Any = None  # the lazy hooks running the rest of the call, once handed over
        self.eval_context: Any = None  # jax's concrete evaluation, entered at the handover
        self.n_args = 0
        self.arg_index = {}
        self.inputs: list = []  # extra inputs: (source, array)
        self.input_of_tensor: dict[int, int] = {}  # id(tensor) -> input position
        self.input_of_array: dict[int, int] = {}  # id(array) -> input position
        self.source_of = {}
        self.seen: set[int] = set()  # ids of tensors already classified
        self.made = {}
        self.saved = Snapshots()
        self.mutated = {}
        self.grad_slots: dict[int, tuple] = {}  # id(owner) -> (owner, read first, had a grad)
        self.grads_written = {}
        self.setattrs: dict[tuple[int, str], tuple] = {}  # (id, name) -> (module, name, old)
        self.attr_outputs = {}
        self.modules: dict[int, Any] = {}
        self.new_modules: dict[int, weakref.ref] = {}  # modules constructed in the region
        self.optimizers: dict[int, Any] = {}
        self.hyper_values: dict[tuple, Any] = {}
        self.hyper_inputs: dict[int, set] = {}
        self.optimizer_states: dict[int, tuple] = {}  # state structure when first seen
        self.managers: dict[int, Any] = {}  # GradManagers whose backward the region runs
        self.new_managers: weakref.WeakSet = weakref.WeakSet()  # made by the region
        self.keep: list = []  # arrays whose ids identify inputs: kept alive while capturing
        self.marked: list = []  # inputs made differentiable leaves (partial_trace)

    # ----- classification of tensors -----------------------------------------------------
    def _save(self, t: Any) -> None:
        self.saved.save(t)

    def _new_input(self, source: Source, array: Any, t: Any = None) -> int:
        if id(array) in self.input_of_array:
            # Another input holds the same immutable array (an alias such as `t.detach()`):
            # give this one its own copy, so the program's constants map back one to one.
            with jax.ensure_compile_time_eval():
                array = jnp.array(array, copy=True)
            if t is not None:
                hooks.set_data(t, array)
        pos = self.n_args + len(self.inputs)
        self.inputs.append((source, array))
        self.input_of_array[id(array)] = pos
        self.keep.append(array)
        if t is not None:
            self.input_of_tensor[id(t)] = pos
        return pos

    def _lift(self, t: Any, source: Lifted | GradSlot) -> None:
        """`t` existed before the region and is read now: make it an input."""
        self.seen.add(id(t))
        self._save(t)
        self.source_of[id(t)] = source
        self._new_input(source, _data(t), t)
        if self.differentiable and hooks.mark_leaf(t):
            self.marked.append(t)
            self.marked_ids.add(id(t))

    def add_argument(self, t: Any, tracer: Any) -> None:
        """Tensor argument `t` holds `tracer` while the region runs."""
        self.seen.add(id(t))
        self._save(t)
        self.arg_index[id(t)] = self.n_args
        self.input_of_tensor[id(t)] = self.n_args
        self.n_args += 1
        hooks.set_data(t, tracer)
        self.arg_tracers[id(tracer)] = t
        self.keep.append(tracer)
        if self.differentiable and hooks.mark_leaf(t):
            self.marked.append(t)
            self.marked_ids.add(id(t))

    # ----- the hooks ---------------------------------------------------------------------
    def read(self, t: Any) -> Any:
        if id(t) not in self.seen:
            self._lift(t, Lifted(t))
        return _data(t)

    def rebind(self, t: Any, value: Any) -> None:
        if id(t) in self.made:
            return
        if id(t) not in self.seen:  # written before being read: an output, not an input
            self.seen.add(id(t))
            self._save(t)
        self.mutated[id(t)] = t

    def created(self, t: Any) -> None:
        key = id(t)
        self.made[key] = weakref.ref(t, lambda _: self.made.pop(key, None))
        self.seen.add(key)

    def value_read(self, t: Any, what: str) -> None:
        a = _data(t)
        if id(t) in self.made and not isinstance(a, jax.core.Tracer) \
                and id(a) not in self.input_of_array:
            return  # a constant made inside the region (not a view of an input): known now
        if self.graph_breaks:
            self._take_over(what, user_location()).value_read(t, what)
            return
        raise value_read_error(self.kind, what)

    def break_here(self, what: str, where: Any) -> None:
        """The region asks for a break (`exclude_from_trace()`): the lazy engine runs the
        rest of the call, starting with what was captured so far."""
        self._take_over(what, where).break_here(what, where)

    def _take_over(self, what: str, where: Any) -> Any:
        """Hand the rest of the call to the lazy engine, whose hooks `on_break` returns and
        which replace these; raise `BreakFound` where it cannot take over."""
        why = self.unresumable or "no lazy engine to hand over to"
        # The rest runs on real arrays although the capture's trace is still current (and so
        # does a replayed backward). Not ensure_compile_time_eval: it also folds constants
        # while segments are traced for compilation, which changes their numerics.
        self.eval_context = jax.core.eval_context()
        self.eval_context.__enter__()
        try:
            lazy = None if self.on_break is None else self.on_break(self, what, where)
        except BaseException:
            if self.lazy is None:
                self._leave_eval()
            raise
        if isinstance(lazy, str):
            why, lazy = lazy, None
        if lazy is None:
            self._leave_eval()
            raise BreakFound(what, where, why)
        self.lazy = lazy
        hooks.hand_over(lazy)
        return lazy

    def _leave_eval(self) -> None:
        self.eval_context.__exit__(None, None, None)
        self.eval_context = None

    def module_call(self, module: Any) -> None:
        if not self._is_new(module):  # a module made by the region is made again each run
            self.modules[id(module)] = module

    def module_created(self, module: Any) -> None:
        self.new_modules[id(module)] = weakref.ref(module)

    def _is_new(self, module: Any) -> bool:
        ref = self.new_modules.get(id(module))
        return ref is not None and ref() is module

    def module_setattr(self, module: Any, name: str, old: Any, value: Any) -> None:
        if self._is_new(module):
            return  # building a module (e.g. slicing a Sequential) changes no model
        if isinstance(old, _Module) or isinstance(value, _Module):
            raise self._rebind_error(module, name, "a sub-module", "outside the region")
        if isinstance(old, _Tensor) and not self.is_created(old) and (
                isinstance(old, eg.Parameter) or id(old) in self.input_of_tensor
                or id(old) in self.mutated):
            raise self._rebind_error(
                module, name, "a Parameter" if isinstance(old, eg.Parameter) else "a tensor "
                "the region reads", f"in place (`self.{name}[...] = new_value`)")
        key = (id(module), name)
        self.setattrs.setdefault(key, (module, name, module.__dict__.get(name, _MISSING)))
        if isinstance(value, _Tensor) or isinstance(old, _Tensor):
            self.attr_outputs[key] = (module, name)

    def _rebind_error(self, module: Any, name: str, what: str, how: str) -> ModuleRebindError:
        where = describe_location(user_location())
        return ModuleRebindError(
            f"{where}: assigning `{name}` of a {type(module).__name__}, which holds {what}, "
            f"inside a {self.kind} region would change the model's structure. Update it {how}, "
            "or do the assignment outside the region.")

    def grad_read(self, owner: Any) -> None:
        self._save(owner)
        g = hooks.raw_grad(owner)
        self.grad_slots.setdefault(id(owner), (owner, True, g is not None))
        if g is not None and id(g) not in self.seen:
            self._lift(g, GradSlot(owner))

    def grad_write(self, owner: Any, value: Any) -> None:
        self.log_grad_write(owner, value)
        self._save(owner)
        self.grad_slots.setdefault(id(owner), (owner, False, None))
        self.grads_written[id(owner)] = owner

    def hyper(self, optimizer: Any, group: dict, key: str, value: Any) -> Any:
        gi = next((i for i, g in enumerate(optimizer.param_groups) if g is group), None)
        if gi is None:  # not one of its param groups: nothing to read it from at call time
            return value
        cache_key = (id(optimizer), gi, key)
        if cache_key in self.hyper_values:
            return self.hyper_values[cache_key]
        self.see_optimizer(optimizer)
        numbers = value if isinstance(value, (tuple, list)) else (value,)
        if not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                   for v in numbers):
            return value  # not numeric: baked in, and the optimizer guard keys on its value
        self.hyper_inputs.setdefault(id(optimizer), set()).add((gi, key))
        arrays = []
        for ei, v in enumerate(numbers):
            with jax.ensure_compile_time_eval():  # device_put, as sources.Hyper: no program
                a = jax.device_put(float(v))
            elem = ei if isinstance(value, (tuple, list)) else None
            self._new_input(Hyper(optimizer, gi, key, elem), a)
            arrays.append(a)
        result = tuple(arrays) if isinstance(value, (tuple, list)) else arrays[0]
        self.hyper_values[cache_key] = result
        return result

    def hyper_write(self, optimizer: Any, group: dict, key: str, value: Any) -> None:
        where = describe_location(user_location())
        raise UnsupportedInRegionError(
            f"{where}: setting `{key}` of a param group of {type(optimizer).__name__} inside a "
            f"{self.kind} region would happen once, when the region is captured, and never on "
            "later calls (a scheduler's step() does this). Do it outside the compiled function "
            "(e.g. call sched.step() after each step: hyper-parameters are read at every call "
            "without recompiling), or inside `with exclude_from_trace():`.")

    def see_optimizer(self, optimizer: Any) -> None:
        """Remember `optimizer` and what its state looked like before the region changed it."""
        if id(optimizer) not in self.optimizers:
            self.optimizers[id(optimizer)] = optimizer
            self.optimizer_states[id(optimizer)] = optimizer_state_signature(optimizer)

    def untracked(self, array: Any) -> Any:
        if not self.differentiable:
            return array
        cut = jax.lax.stop_gradient(array)
        self.aliases[id(cut)] = array  # the same value, for a handover (`lazy.handover.Plan`)
        self.keep.append(cut)
        return cut

    def function_call(self, function: Any) -> None:
        self.unresumable = self.unresumable or f"the custom Function {type(function).__name__}"
        if self.differentiable:
            raise function_in_region(
                self.kind, function, "whose backward is derived by jax from the forward, so "
                "its own backward would be ignored", "Call it outside the region, or compile "
                "the whole step with xla_trace (which runs Function backwards).")

    def manager_created(self, manager: Any) -> None:
        self.new_managers.add(manager)

    def recording(self, manager: Any, on: bool) -> None:
        self.log_recording(manager, on)

    def backward(self, manager: Any, y: Any = None, dy: Any = None) -> None:
        self.log_backward(manager, y, dy)
        if manager not in self.new_managers:
            self.managers.setdefault(id(manager), manager)
        if self.differentiable:
            raise backward_in_partial_trace()

    # ----- putting things back -------------------------------------------------------------
    def restore(self, failed: bool) -> None:
        """Put back every tensor, `.grad` slot and tensor-valued module attribute (all module
        attributes, when the capture failed; otherwise plain values the region assigned stay,
        as Python side effects of the capture). Once handed over, the lazy engine owns
        the call's effects: nothing is put back."""
        if self.lazy is not None:
            self._forget()
            return
        self.saved.restore_all()
        for t in self.marked:
            hooks.unmark_leaf(t)
        for key, (module, name, old) in self.setattrs.items():
            if not failed and key not in self.attr_outputs:
                continue
            if old is _MISSING:
                module.__dict__.pop(name, None)
            else:
                object.__setattr__(module, name, old)
        if failed:
            invalidate_unfinished([r() for r in list(self.made.values())],
                                  lambda a: isinstance(a, jax.core.Tracer))
        self._forget()

    def _forget(self) -> None:
        """Drop every reference to the region's tensors and arrays, so nothing but their owners
        holds them (a donated buffer must have no other holder), without waiting for the
        garbage collector: this object sits in a reference cycle through its weak-reference
        callbacks."""
        for holder in (self.saved, self.inputs, self.input_of_tensor, self.input_of_array,
                       self.source_of, self.made, self.mutated, self.grad_slots,
                       self.grads_written, self.setattrs, self.attr_outputs, self.modules,
                       self.new_modules, self.optimizers, self.hyper_values, self.keep,
                       self.marked, self.managers, self.log, self.arg_tracers, self.aliases,
                       self.logged_outputs):
            holder.clear()
        self.results = self.result_tensors = self.settle = []
        self.lazy = None


_MISSING = object()
