"""A backward pass that is itself recorded, for higher-order gradients (MegEngine's nested
GradManagers): while another manager records, `gm.backward` applies each node's vjp as an op on
Tensors, so the gradients it leaves in `.grad` carry history that the outer manager's backward
differentiates again.

>>> import eager as eg
>>> from eager.autodiff import GradManager
>>> x = eg.Parameter(3.0)
>>> outer, inner = GradManager().attach([x]), GradManager().attach([x])
>>> with outer:
...     with inner:
...         inner.backward(x ** 3)        # x.grad = 3x^2 = 27, recorded by `outer`
...     g = x.grad
...     x.grad = None
...     outer.backward(g)                 # d(3x^2)/dx = 6x = 18
>>> x.grad.item()
18.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from . import tape
from .errors import BackwardError
from .ops import Op
from .ops.registry import make_vjp
from .tensors import Tensor, _wrap, apply


def vjp_op(op: Op, key: tuple, mask: tuple, n: int) -> Op:
    """The backward of `op` (attributes `key`, differentiated positions `mask`, `n` inputs) as
    an op of its own: inputs are the n primals then one cotangent per output, outputs one
    gradient per position in `mask`. jax differentiates it again like any other op. Cached on
    `op`, so it lives as long as `op` does (a compiled segment's op dies with its entry)."""
    found = op.derived.get((key, mask, n))
    if found is None:
        bwd = make_vjp(op, dict(key), mask)

        def fwd(*args: Any) -> tuple:
            return tuple(bwd(args[:n], args[n:]))

        found = op.derived[(key, mask, n)] = Op(f"{op.name}.vjp", fwd, multi_output=True)
    return found


def backward(targets: Sequence[Tensor], cotangents: Sequence[Tensor],
             start: int | None = None) -> dict[int, list]:
    """`tape.backward`, recorded: `{id(leaf): [leaf, gradient Tensor with history]}`. The
    forward graph is kept (not freed): the outer manager's backward goes through it again.
    `start`: when the manager running it began recording; it goes through the nodes that
    manager sees, and what it records is seen only by managers that began before it."""
    with tape.recorded_below(start):
        return _backward(targets, cotangents, start)


def _backward(targets: Sequence[Tensor], cotangents: Sequence[Tensor],
              start: int | None) -> dict[int, list]:
    # Keyed by id: every key's object is held meanwhile (each leaf in its entry, each node by
    # the list being walked), so no id can be reused while these dicts live.
    leaves: dict[int, list] = {}
    pending: dict[int, list] = {}

    def send(parent: Any, g: Tensor) -> None:
        if type(parent) is tuple:
            node, index = parent
            if not node.visible_to(start):
                return
            cts = pending.setdefault(id(node), [None] * len(node.out_avals))
            cts[index] = g if cts[index] is None else cts[index] + g
        else:
            entry = leaves.setdefault(id(parent), [parent, None])
            entry[1] = g if entry[1] is None else entry[1] + g

    starts = []
    for t, ct in zip(targets, cotangents):
        if t._node is not None:
            starts.append(t._node)
        send(tape.parent_of(t), ct)
    for node in tape._reachable(starts, start):
        cts = pending.pop(id(node), None)
        if cts is None:
            continue
        for parent, g in zip(node.parents, _node_grads(node, cts)):
            if g is not None:
                send(parent, g)
    return leaves


def _node_grads(node: tape.Node, cts: list) -> tuple:
    if node.op is None:
        raise BackwardError(
            f"a second-order gradient (a GradManager.backward while another manager records) "
            f"reached {node.name!r}, whose backward cannot be recorded (a custom Function, or a "
            "compiled segment with per-rank collectives). Compute that part with eager ops, or "
            "release the outer manager before the inner backward if you need first-order "
            "gradients only.")
    op, key, mask, primals = node.op
    args = list(primals)
    for i, parent in zip(mask, node.parents):
        args[i] = _primal(parent, primals[i], node.name)
    cts = [_wrap(jnp.zeros(s, d)) if c is None else c for c, (s, d) in zip(cts, node.out_avals)]
    return apply(vjp_op(op, key, mask, len(primals)), *args, *cts)


def _primal(parent: Any, array: Any, name: str) -> Tensor:
    """The input `array` of a node as a Tensor with its gradient history (`parent`)."""
    if type(parent) is tuple:
        t = _wrap(array)
        t._node, t._out_idx = parent
        return t
    if parent._data is not array:
        raise BackwardError(
            f"a tensor of shape {parent.shape} used by {name!r} was updated in place before a "
            "second-order backward; its gradient would belong to a value it no longer holds. "
            "Update it after the outer backward.")
    return parent


