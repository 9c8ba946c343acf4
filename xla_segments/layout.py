"""Channels-last convolutions inside a segment, behind its channels-first interface (the API is
NCHW; the layout inside a compiled region is the compiler's business, NHWC where faster).

`channels_last(fn, avals)` traces `fn` once and returns a function computing the same values
whose convolutions produce their outputs channels-last (NHWC for an NCHW network); the layout
then propagates through elementwise ops (per-channel operands broadcast), reductions, pooling
and its gradients, padding, transposes and nested calls, and a value goes back to its logical
layout (one transpose) only where an op is not layout-aware (a reshape, a matmul, the
segment's outputs). A convolution takes its operands in whatever layout they arrive by
renumbering its dimension numbers, so no transpose is ever added in front of it.

Why: XLA:CPU computes convolutions channels-last; given NCHW it transposes around every
convolution, and BatchNorm reductions and per-channel broadcasts over NCHW are slower than over
NHWC. Measured on the cnn step: 15% faster, 2.4x with `conv_options` (`reference/cnn-cpu.md`).
The values are the same ops on permuted arrays; gradients (jax's own rules, applied to the
rewritten function) are those of the same convolutions.

A layout is a permutation `perm` of a value's logical axes: its physical array is
`jnp.transpose(logical, perm)`; None is the logical layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex

from .jaxprs import CALLS, uses

# Ops that act on each element alone: they run on permuted operands unchanged (operands of the
# result's shape, scalars, or of its rank with size-1 axes that broadcast), and their result
# keeps the operands' layout.
_ELEMENTWISE = frozenset({
    "abs", "acos", "acosh", "add", "add_any", "and", "asin", "asinh", "atan", "atan2", "atanh",
    "cbrt", "ceil", "clamp", "convert_element_type", "copy", "copy_p", "cos", "cosh", "div", "eq",
    "erf", "erf_inv", "erfc", "exp", "exp2", "expm1", "floor", "ge", "gt", "imag", "integer_pow",
    "is_finite", "le", "lgamma", "digamma", "log", "log1p", "logistic", "lt", "max", "min", "mul",
    "ne", "neg", "nextafter", "not", "or", "pow", "real", "reduce_precision", "rem", "round",
    "rsqrt", "select_n", "sign", "sin", "sinh", "sqrt", "square", "stop_gradient", "sub", "tan",
    "tanh", "xor",
})
_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
                         "reduce_or", "argmax", "argmin"})
# Ops over windows of each axis (pooling, its gradients, padding): they run on permuted operands
# with their per-axis parameters permuted alike.
_WINDOWED = {
    "reduce_window_max": ("window_dimensions", "window_strides", "padding", "base_dilation",
                          "window_dilation"),
    "reduce_window_min": ("window_dimensions", "window_strides", "padding", "base_dilation",
                          "window_dilation"),
    "reduce_window_sum": ("window_dimensions", "window_strides", "padding", "base_dilation",
                          "window_dilation"),
    "select_and_gather_add": ("window_dimensions", "window_strides", "padding", "base_dilation",
                              "window_dilation"),
    "select_and_scatter_add": ("window_dimensions", "window_strides", "padding"),
    "pad": ("padding_config",),
}
_CONV = "conv_general_dilated"


def has_convolution(jaxpr: Any) -> bool:
    """Whether `jaxpr` (a Jaxpr or ClosedJaxpr) convolves anywhere, nested jaxprs included."""
    return uses(jaxpr, _CONV)


def channels_last(fn: Callable, avals: Sequence[Any]) -> Callable:
    """`fn` (positional arrays -> pytree of arrays) with channels-last convolutions inside, for
    inputs like `avals`; `fn` itself when it has no convolution. Traces `fn` once."""
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*avals)
    if not has_convolution(closed.jaxpr):
        return fn
    treedef = jax.tree.structure(shapes)

    def rewritten(*inputs: Any) -> Any:
        outs = _eval(closed.jaxpr, closed.consts, [(x, None) for x in inputs])
        return jax.tree.unflatten(treedef, [_to(x, p, None) for x, p in outs])

    rewritten.__name__ = getattr(fn, "__name__", "segment")
    return rewritten


def _eval(jaxpr: Any, consts: Sequence[Any], args: list[tuple]) -> list[tuple]:
    """Evaluate `jaxpr` on (physical value, layout) pairs; returns such pairs."""
    env: dict = {}

    def read(v: Any) -> tuple:
        return (v.val, None) if isinstance(v, jex.Literal) else env[v]

    for var, c in zip(jaxpr.constvars, consts):
        env[var] = (c, None)
    for var, a in zip(jaxpr.invars, args):
        env[var] = a
    for eqn in jaxpr.eqns:
        with eqn.ctx.manager:
            outs = _apply(eqn, [read(v) for v in eqn.invars])
        for var, out in zip(eqn.outvars, outs):
            env[var] = out
    return [read(v) for v in jaxpr.outvars]


def _apply(eqn: Any, ins: list[tuple]) -> list[tuple]:
    name = eqn.primitive.name
    plain = all(p is None for _, p in ins)
    if name == _CONV:
        return _conv(eqn, ins)
    if name in CALLS and not (plain and not has_convolution(eqn.params["jaxpr"])):
        inner = eqn.params["jaxpr"]  # inlined: its values keep their layouts across the call
        return _eval(inner.jaxpr, inner.consts, ins)
    if plain:
        return _bind(eqn, [x for x, _ in ins], None)  # nothing permuted: as traced
    if name in _ELEMENTWISE and _broadcasts(eqn):
        return _elementwise(eqn, ins)
    if name in _REDUCTIONS:
        return _reduce(eqn, ins)
    if name in _WINDOWED:
        return _elementwise(eqn, ins, per_axis=_WINDOWED[name])
    if name == "transpose":
        (x, p), = ins
        perm = eqn.params["permutation"]
        return [(x, _norm(tuple(perm.index(a) for a in p)))]
    if name == "rev":
        (x, p), = ins
        dims = tuple(p.index(d) for d in eqn.params["dimensions"])
        return _bind(eqn, [x], p, dimensions=dims)
    return _bind(eqn, [_to(x, p, None) for x, p in ins], None)  # not layout-aware


def _bind(eqn: Any, values: list, perm: tuple | None, **changes: Any) -> list[tuple]:
    params = dict(eqn.primitive.get_bind_params(eqn.params), **changes)
    out = eqn.primitive.bind(*values, **params)
    outs = out if eqn.primitive.multiple_results else [out]
    return [(o, perm) for o in outs]


def _broadcasts(eqn: Any) -> bool:
    """Every operand is a scalar or has the result's rank, each axis its size or 1 (a per-channel
    `(1, C, 1, 1)` against `(N, C, H, W)`): the op maps elements to elements, whatever the order
    of the axes, once all operands share one permutation."""
    out = tuple(eqn.outvars[0].aval.shape)
    for v in eqn.invars:
        shape = tuple(getattr(v.aval, "shape", ()))
        if shape and (len(shape) != len(out)
                      or any(s not in (o, 1) for s, o in zip(shape, out))):
            return False
    return all(tuple(v.aval.shape) == out for v in eqn.outvars)


def _elementwise(eqn: Any, ins: list[tuple], per_axis: Sequence[str] = ()) -> list[tuple]:
    """`eqn` on its operands in one layout, the result in it too; the parameters named in
    `per_axis` (one entry per axis) permuted alike."""
    # The first permuted operand sets the layout; others are permuted to it (a permuted
    # broadcast of a per-channel vector is a broadcast again: XLA folds the transpose in).
    perm = next(p for _, p in ins if p is not None)
    values = [x if not jnp.ndim(x) else _to(x, p, perm) for x, p in ins]
    changes = {k: tuple(eqn.params[k][a] for a in perm) for k in per_axis}
    return _bind(eqn, values, perm, **changes)


def _reduce(eqn: Any, ins: list[tuple]) -> list[tuple]:
    (x, p), = ins
    axes = tuple(sorted(p.index(a) for a in eqn.params["axes"]))
    kept = [p[i] for i in range(len(p)) if i not in axes]  # logical axes in physical order
    order = sorted(kept)
    return _bind(eqn, [x], _norm(tuple(order.index(a) for a in kept)), axes=axes)


def _conv(eqn: Any, ins: list[tuple]) -> list[tuple]:
    """The convolution on operands as they are (dimension numbers renumbered to their physical
    axes), its result channels-last: (batch, spatial..., feature)."""
    (lhs, lp), (rhs, rp) = ins
    dn = eqn.params["dimension_numbers"]
    rank = len(dn.out_spec)
    out_perm = (dn.out_spec[0], *dn.out_spec[2:], dn.out_spec[1])
    numbers = lax.ConvDimensionNumbers(
        lhs_spec=tuple(_position(lp, d) for d in dn.lhs_spec),
        rhs_spec=tuple(_position(rp, d) for d in dn.rhs_spec),
        out_spec=(0, rank - 1, *range(1, rank - 1)))
    return _bind(eqn, [lhs, rhs], _norm(out_perm), dimension_numbers=numbers)


def _position(perm: tuple | None, axis: int) -> int:
    """The physical position of logical `axis` under `perm`."""
    return axis if perm is None else perm.index(axis)


def _norm(perm: tuple) -> tuple | None:
    return None if perm == tuple(range(len(perm))) else perm


def _to(x: Any, have: tuple | None, want: tuple | None) -> Any:
    """Physical `x` in layout `have`, transposed to layout `want`."""
    if have == want:
        return x
    rank = jnp.ndim(x)  # the length of either layout
    have = have if have is not None else tuple(range(rank))
    want = want if want is not None else tuple(range(rank))
    return lax.transpose(x, tuple(have.index(a) for a in want))
