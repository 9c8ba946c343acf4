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
    inline = uses(closed, "broadcast_in_dim")
    traced: list[bool] = []

    def forward(*inputs: Any) -> tuple:  # the traced jaxpr: `fwd`'s Python runs once, above
        flat = jax.tree.leaves(inputs)
        if not inline:
            res = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *flat)
        else:  # calls inlined, so that a residual broadcast inside one is in reach; done
            # in the trace that lowers the forward (a trace of its own before this cost Faster
            # R-CNN's cold first step about 0.5 s of Python, RetinaNet's 0.2 s)
            res, made = _inlined(closed.jaxpr, closed.consts, flat)
            narrowed.clear()
            for k in range(n_outs, len(res)):
                if made[k] is not None:
                    res[k], narrowed[k - n_outs] = made[k]
        traced[:] = [True]
        return jax.tree.unflatten(outs_tree, res[:n_outs]), list(res[n_outs:])

    def rebuild(kept_res: list) -> Callable:
        if inline and not traced:  # which residuals are narrowed is found tracing the forward
            jax.eval_shape(forward, *avals)
        full: list = [jax.numpy.zeros(a.shape, a.dtype) for a in leaves]  # unused: XLA drops
        for j, (i, r) in enumerate(zip(kept, kept_res)):
            full[i] = narrowed[j].apply(r) if j in narrowed else r
        return jax.tree.unflatten(tree, full)

    return forward, rebuild


def _is_var(atom: Any) -> bool:
    """A jaxpr variable, not a literal (literals are unhashable, and never computed)."""
    return not isinstance(atom, jex.Literal)


def _inlined(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> tuple[list, list]:
    """`jaxpr` evaluated with its nested calls (jnp's functions, the ops' own jits) inlined, and
    for each output `(source, broadcast)` if a broadcast of a smaller `source` made it, else
    None: a residual broadcast inside a call is narrowed like one outside."""
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    made: dict[Any, tuple[Any, _Broadcast]] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jex.Literal) else env[v]

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        inner = eqn.params.get("jaxpr")
        if eqn.primitive.name in CALLS and inner is not None and not eqn.effects:
            outs, inner_made = _inlined(getattr(inner, "jaxpr", inner),
                                        getattr(inner, "consts", ()), ins)
            made.update((o, m) for o, m in zip(eqn.outvars, inner_made) if m is not None)
        else:
            out = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(eqn.params))
            outs = out if eqn.primitive.multiple_results else [out]
            found = _broadcast_of(eqn, ins)
            if found is not None:
                made[eqn.outvars[0]] = found
        env.update(zip(eqn.outvars, outs))
    return ([read(v) for v in jaxpr.outvars],
            [made.get(v) if _is_var(v) else None for v in jaxpr.outvars])


def _broadcast_of(eqn: Any, ins: list) -> tuple[Any, _Broadcast] | None:
    """`(source, broadcast)` if `eqn`, bound on `ins`, broadcasts a smaller `source` (a traced
    value or a constant), else None."""
    if eqn.primitive.name != "broadcast_in_dim":
        return None
    if math.prod(eqn.invars[0].aval.shape) >= math.prod(eqn.outvars[0].aval.shape):
        return None
    p = eqn.params
    return ins[0], _Broadcast(tuple(p["shape"]), tuple(p["broadcast_dimensions"]),
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
