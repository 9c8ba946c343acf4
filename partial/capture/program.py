"""`Program`: a captured region as a pure function over arrays, with what a call needs to feed
it (input sources) and to use what it returns (writes, output leaves), the guards' raw material,
and `build_program`, which makes one from a finished capture."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

import eager as eg
import eager.distributed as dist
import eager.module as M
from xla_segments import PerRank, abstract

from ..region import ArgumentStateGuard, Call, Lifted

hooks = eg.hooks
_Module = M.Module


@dataclass
class Program:
    """A captured region: the jaxpr and how to feed it and use what it returns."""

    jaxpr: Any
    consts: list  # per constvar: (input position, None) or (None, baked array)
    n_args: int
    in_avals: list  # per input (shape, dtype, weak type, placement): arguments first
    sources: list  # per extra input: its source (Lifted, GradSlot or Hyper)
    n_results: int
    deps: list  # per result: frozenset of input positions it depends on differentiably
    writes: list  # effects (Rebind, SetGrad, SetAttr): what to write back after a call
    out_treedef: Any
    out_leaves: list  # per output leaf: a value (Result, Argument, Held, GradOf, Constant)
    modules: list  # (weakref, signature exclusions) for every module whose structure matters
    optimizers: list  # (weakref, (group index, key)s read as inputs, state structure before)
    grad_presence: list  # (owner weakref, had a .grad) for slots read before written
    managers: list  # weak references to the GradManagers whose backward the region runs
    arg_guard: ArgumentStateGuard  # which Tensor arguments are state the region reads
    settle: list = field(default_factory=list)  # (weakref, result): capture-time result objects
    per_rank: PerRank | None = None  # set when it calls per-rank collectives: compiled SPMD
    seconds: float = 0.0
    epoch: int = 0  # eager.hooks.epoch() before the capture ran

    def function(self) -> Callable[..., list]:
        """The pure function over (argument arrays, extra input arrays)."""
        jaxpr, consts, n = self.jaxpr, self.consts, self.n_args

        def region(*inputs: Any) -> list:
            values = [inputs[p] if p is not None else v for p, v in consts]
            return jax.core.eval_jaxpr(jaxpr, values, *inputs[:n])

        return region


def build_program(cap: Any, closed: Any, call: Call, capture_as_const: bool,
                  owners: Sequence[Any] = ()) -> Program:
    """The `Program` of a finished capture `cap` whose trace is `closed` (a ClosedJaxpr);
    `owners` are Modules whose state counts as an argument's (the module a region runs)."""
    n = cap.n_args
    baked = _bakeable(cap, [*call.objects, *owners]) if capture_as_const else set()
    # Keep the extra inputs the program uses, in order; renumber them after the arguments.
    used: dict[int, None] = {}  # an ordered set
    for c in closed.consts:
        pos = cap.input_of_array.get(id(c))
        if pos is not None and pos not in baked:
            used.setdefault(pos, None)
    # grouped by kind (a call gathers each kind at once), in capture order within a kind
    order = sorted(used, key=lambda p: (cap.inputs[p - n][0].order, p))
    new_pos = {old: n + i for i, old in enumerate(order)}
    consts = [(new_pos[p], None) if (p := cap.input_of_array.get(id(c))) in new_pos else (None, c)
              for c in closed.consts]
    sources = [cap.inputs[p - n][0] for p in order]
    in_avals = [abstract(a) for a in call.arrays] + [abstract(cap.inputs[p - n][1])
                                                      for p in order]

    remap = {**{i: i for i in range(n)}, **new_pos}
    if cap.differentiable:
        leaves = hooks.leaf_dependencies(cap.result_tensors)
        deps = [frozenset(remap[q] for t in ls if (q := cap.input_of_tensor.get(id(t))) in remap)
                for ls in leaves]
    else:
        deps = [frozenset()] * len(cap.results)

    modules = _guarded_modules(cap, call)
    state = _state_tensors(modules, cap.optimizers.values(), call)
    return Program(
        jaxpr=_bare(closed.jaxpr), consts=consts, n_args=n, in_avals=in_avals, sources=sources,
        n_results=len(cap.results), deps=deps, writes=cap.writes,
        out_treedef=cap.out_treedef, out_leaves=cap.out_leaves,
        modules=[(weakref.ref(m), frozenset(name for (mid, name) in cap.attr_outputs
                                            if mid == id(m))) for m in modules],
        optimizers=[(weakref.ref(o), frozenset(cap.hyper_inputs.get(id(o), ())),
                     cap.optimizer_states[id(o)]) for o in cap.optimizers.values()],
        grad_presence=[(weakref.ref(owner), had_grad)
                       for owner, read_first, had_grad in cap.grad_slots.values() if read_first],
        managers=[weakref.ref(gm) for gm in cap.managers.values()],
        arg_guard=ArgumentStateGuard(state, call.tensors), settle=cap.settle,
        per_rank=(PerRank(dist.rank_mesh(), dist.RANK_AXIS)
                  if uses_axis(closed.jaxpr, dist.RANK_AXIS) else None),
    )


def _bare(jaxpr: Any) -> Any:
    """`jaxpr` without the constant values jax 0.12 keeps inside it (`Jaxpr.consts`; 0.10 has
    none): the program passes them itself, and holding them kept the capture's arrays alive,
    the lifted parameters and optimizer state among them, shared with the first call, which
    then copied each one it would donate (and the copies stayed for the program's life)."""
    return jaxpr.replace(consts=[]) if getattr(jaxpr, "consts", None) else jaxpr


def uses_axis(jaxpr: Any, axis: str) -> bool:
    """Whether `jaxpr` (or one nested in it: a cond branch, a scan body, a checkpoint)
    communicates over the named `axis` (psum, all_gather, axis_index, ...)."""
    for eqn in jaxpr.eqns:
        for name, value in eqn.params.items():
            if name in ("axes", "axis_name") and (
                    value == axis or isinstance(value, tuple) and axis in value):
                return True
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr
                if hasattr(inner, "eqns") and uses_axis(inner, axis):
                    return True
    return False


def _guarded_modules(cap: Any, call: Call) -> list:
    """Every module the region called or was given, with all their sub-modules."""
    roots = list(cap.modules.values()) + [o for o in call.objects if isinstance(o, _Module)]
    seen: dict[int, Any] = {}
    for root in roots:
        for m in root.modules():
            seen.setdefault(id(m), m)
    return list(seen.values())


def _state_tensors(modules: list, optimizers: Any, call: Call) -> dict[int, Any]:
    """id -> tensor for the parameters, buffers and optimizer state the region may reach."""
    state: dict[int, Any] = {}
    for m in modules:
        for t in m.parameters() + m.buffers():
            state[id(t)] = t
    opts = list(optimizers) + [o for o in call.objects if isinstance(o, eg.optimizer.Optimizer)]
    for o in opts:
        for g in o.param_groups:
            for p in g["params"]:
                state[id(p)] = p
        for s in o.state.values():
            for t in s.values():
                state[id(t)] = t
    return state


def _bakeable(cap: Any, objects: list) -> set[int]:
    """Input positions `capture_as_const=True` bakes in: closed-over tensors that the region
    does not rebind and that are not reachable from Module or Optimizer arguments."""
    reachable: set[int] = set()
    for o in objects:
        if isinstance(o, _Module):
            reachable.update(id(t) for t in o.parameters() + o.buffers())
        else:
            reachable.update(id(p) for g in o.param_groups for p in g["params"])
            reachable.update(id(t) for s in o.state.values() for t in s.values())
    random_key = id(eg.random.get_state())
    baked = set()
    for tid, pos in cap.input_of_tensor.items():
        if pos < cap.n_args:
            continue
        source = cap.inputs[pos - cap.n_args][0]
        if isinstance(source, Lifted) and tid not in reachable and tid not in cap.mutated \
                and tid != random_key:
            baked.add(pos)
    return baked
