"""What a training forward hands its backward: only the residuals the pullback reads, and each
broadcast residual at the size it had before it was broadcast.

`jax.vjp` keeps some values its transpose never uses (on a ResNet step a third of the residual
bytes); as outputs of the forward they are computed, written and held until the backward for
nothing. And it keeps broadcasts whole: `jnp.where(causal_mask, scores, -inf)` saves the
`[T, T]` mask broadcast to the scores' `[B, H, T, T]` (a padding mask `[B, 1, 1, T]` alike), B·H
bytes held from forward to backward per mask element (the GPT workload: 0.5 of its 36 MiB of
residuals). The forward returns the value before the broadcast instead, and the backward
broadcasts it again (XLA fuses a broadcast into its consumers: no copy is made).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
from jax.extend import core as jex

from .jaxprs import CALLS, uses


class _Broadcast(NamedTuple):
    """A residual that is `lax.broadcast_in_dim(source, shape, dims)`."""

    shape: tuple
    dims: tuple
    sharding: Any

    def apply(self, source: Any) -> Any:
        extra = {} if self.sharding is None else {"out_sharding": self.sharding}
        return jax.lax.broadcast_in_dim(source, self.shape, self.dims, **extra)


def slim(fwd: Callable, avals: Sequence[Any], diff_outputs: tuple[int, ...]
         ) -> tuple[Callable, Callable]:
    """`fwd(*inputs) -> (outputs, pullback)` made to return `(outputs, residuals)`: only the
    residuals the pullback reads, broadcasts narrowed to their source; and `rebuild(residuals)`,
    the pullback again (broadcasts re-applied, unread residuals as zeros that XLA drops)."""
    # One trace of the forward gives its jaxpr, its outputs' avals and the pullback's residual
    # tree (a second, for the pruned outputs, cost RetinaNet's first step 0.3 s of Python).
    closed, (out_avals, pullback) = jax.make_jaxpr(fwd, return_shape=True)(*avals)
    leaves, tree = jax.tree.flatten(pullback)
    cts = tuple(out_avals[j] for j in diff_outputs)
    used = _used_inputs(jax.make_jaxpr(
        lambda res, c: tuple(jax.tree.unflatten(tree, res)(c)))(leaves, cts).jaxpr, len(leaves))
    kept = [i for i, u in enumerate(used) if u]
    outs_tree = jax.tree.structure(out_avals)
    n_outs = len(jax.tree.leaves(out_avals))
    outvars = closed.jaxpr.outvars
    closed = closed.replace(jaxpr=closed.jaxpr.replace(
        outvars=[*outvars[:n_outs], *(outvars[n_outs + i] for i in kept)]))
    narrowed: dict[int, _Broadcast] = {}
    if uses(closed, "broadcast_in_dim"):
        closed = jax.make_jaxpr(lambda *a: _inlined(closed.jaxpr, closed.consts, a))(*avals)
        outvars = list(closed.jaxpr.outvars)
        made = {o: eqn for eqn in closed.jaxpr.eqns for o in eqn.outvars}
        for k in range(n_outs, len(outvars)):
            found = _broadcast_of(made.get(outvars[k]) if _is_var(outvars[k]) else None,
                                  outvars[k])
            if found is not None:
                outvars[k], narrowed[k - n_outs] = found
        closed = closed.replace(jaxpr=closed.jaxpr.replace(outvars=outvars))

    def forward(*inputs: Any) -> tuple:  # the traced jaxpr: `fwd`'s Python runs once, above
        res = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree.leaves(inputs))
        return jax.tree.unflatten(outs_tree, res[:n_outs]), list(res[n_outs:])

    def rebuild(kept_res: list) -> Callable:
        full: list = [jax.numpy.zeros(a.shape, a.dtype) for a in leaves]  # unused: XLA drops
        for j, (i, r) in enumerate(zip(kept, kept_res)):
            full[i] = narrowed[j].apply(r) if j in narrowed else r
        return jax.tree.unflatten(tree, full)

    return forward, rebuild


def _is_var(atom: Any) -> bool:
    """A jaxpr variable, not a literal (literals are unhashable, and never computed)."""
    return not isinstance(atom, jex.Literal)


def _inlined(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list:
    """`jaxpr` evaluated with its nested calls (jnp's functions, the ops' own jits) inlined, so
    that a residual broadcast inside one has its source in reach of the forward's outputs."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jex.Literal) else env[v]

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        inner = eqn.params.get("jaxpr")
        if eqn.primitive.name in CALLS and inner is not None and not eqn.effects:
            outs = _inlined(getattr(inner, "jaxpr", inner), getattr(inner, "consts", ()), ins)
        else:
            out = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
            outs = out if eqn.primitive.multiple_results else [out]
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _broadcast_of(eqn: Any, var: Any) -> tuple[Any, _Broadcast] | None:
    """`(source, broadcast)` if `eqn`, which makes `var`, broadcasts a smaller `source` (a
    variable or a literal); None otherwise (also for an input: no `eqn`)."""
    if eqn is None or eqn.primitive.name != "broadcast_in_dim":
        return None
    source = eqn.invars[0]
    if math.prod(source.aval.shape) >= math.prod(var.aval.shape):
        return None
    p = eqn.params
    return source, _Broadcast(tuple(p["shape"]), tuple(p["broadcast_dimensions"]),
                              p.get("sharding"))


def _used_inputs(jaxpr: Any, n: int) -> list[bool]:
    """Which of the first `n` inputs of `jaxpr` its outputs depend on."""
    return _live_inputs(jaxpr, [True] * len(jaxpr.outvars))[:n]


def _live_inputs(jaxpr: Any, live_out: Sequence[bool]) -> list[bool]:
    """Which inputs of `jaxpr` the outputs marked in `live_out` depend on: a backward walk that
    skips equations whose results nothing live reads (and that have no side effects), looking
    into nested jit calls (a vjp's transpose is one, reading every residual it is given)."""
    live = {v for v, keep in zip(jaxpr.outvars, live_out) if keep and _is_var(v)}
    for eqn in reversed(jaxpr.eqns):
        outs = [v in live for v in eqn.outvars]
        if not (eqn.effects or any(outs)):
            continue
        inner = eqn.params.get("jaxpr")
        inner = getattr(inner, "jaxpr", inner)
        if (not eqn.effects and eqn.primitive.name in CALLS
                and inner is not None and len(inner.invars) == len(eqn.invars)):
            used = _live_inputs(inner, outs)
            live.update(v for v, u in zip(eqn.invars, used) if u and _is_var(v))
        else:
            live.update(v for v in eqn.invars if _is_var(v))
    return [v in live for v in jaxpr.invars]
