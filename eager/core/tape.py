"""The tape: grad nodes recorded while a GradManager records, and the backward pass over them.

A node stands for one op call (or one custom Function call). It holds the op's input arrays
(the residuals its vjp needs), one parent per differentiable input, and, during a backward pass,
the cotangents of its outputs. Parents are `(node, output_index)` for tensors produced by a
recorded op, or the tensor itself for leaves (tensors attached to a GradManager).

Nodes get increasing sequence numbers, and an op's inputs always exist before its outputs, so
processing reachable nodes by decreasing sequence number is a valid reverse topological order.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from . import device as _device
from . import profiling as _profiling
from .errors import BackwardError
from .ops.persistent import Kept
from .ops.registry import start_vjp

# Per thread: (how many GradManagers record now, no_grad / Function-forward depth). A
# GradManager recording in one thread never makes another thread's ops record.
_STATE: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar(
    "eager_tape", default=(0, 0))
state = _STATE.get
_seq = itertools.count()
# Per thread: while a GradManager's backward is itself recorded (nested managers), the start
# of that manager (`GradManager._start`): the nodes recorded then are seen only by managers
# that began before it, as MegEngine's (a manager never sees its own backward, nor one of its
# group's: a group's managers share one start).
_HORIZON: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "eager_tape_horizon", default=None)
# kept on disk with the eager ops' programs: a new process loads it per shape, not compiles it
_add = Kept("tape_add", jnp.add, ())


def set_state(new: tuple[int, int]) -> None:
    """Set this thread's recording state `(recording managers, no_grad depth)`."""
    _STATE.set(new)


def change(recording: int = 0, paused: int = 0) -> None:
    """Add to this thread's counts of recording managers and no_grad depth."""
    r, p = _STATE.get()
    _STATE.set((r + recording, p + paused))


_flags = [0]  # bumped by every `Tensor.requires_grad` change, in any thread


def flags_changed() -> None:
    """A tensor was frozen or unfrozen: managers' versions move (compiled steps re-check)."""
    _flags[0] += 1


def flags_epoch() -> int:
    return _flags[0]


_DIFFERENTIABLE: dict[Any, bool] = {}


def differentiable(dtype: Any) -> bool:
    """Whether values of `dtype` carry gradients: every floating and complex type, bfloat16
    and the float8 types included (numpy files those under kind "V", so `kind in "fc"` misses
    them). Cached per dtype: it is asked on every recorded op."""
    found = _DIFFERENTIABLE.get(dtype)
    if found is None:
        found = _DIFFERENTIABLE[dtype] = bool(jnp.issubdtype(dtype, jnp.inexact))
    return found


def is_recording() -> bool:
    """True when an op on a tensor with gradient history would be recorded now."""
    r, p = _STATE.get()
    return r > 0 and p == 0


class Finished:
    """A leaf's whole gradient with the backwarding GradManager's callbacks already applied
    (a compiled segment ran them in its backward): the manager accumulates it as it is."""

    __slots__ = ("grad",)

    def __init__(self, grad: Any):
        self.grad = grad


class Node:
    """One recorded call. `vjp(cotangents) -> grads`, one grad per parent (None allowed)."""

    __slots__ = ("seq", "name", "vjp", "parents", "out_avals", "cts", "freed", "sparse", "op",
                 "finish", "horizon", "__weakref__")

    def __init__(self, name: str, vjp: Callable, parents: Sequence, out_avals: Sequence,
                 sparse: bool = False, op: tuple | None = None,
                 finish: Callable | None = None):
        self.seq = next(_seq)
        self.name = name
        self.vjp: Callable | None = vjp  # None once freed: the residuals are dropped
        self.parents = parents
        self.out_avals = out_avals  # (shape, dtype) per output
        self.cts: list | None = None
        self.freed = False
        # A sparse node's vjp receives None for outputs no gradient reached (a compiled
        # segment, to give None rather than zeros to inputs only those outputs depend on).
        self.sparse = sparse
        # (op, attrs key, differentiated positions, input arrays) for a registry op's node:
        # what a recorded backward (`eager.core.higher_order`) needs to apply the vjp as an op.
        self.op = op
        if op is not None:  # its backward program, compiled meanwhile on the compile pool
            start_vjp(op, out_avals)
        # `finish(cotangents, sole, manager)`, optional: the vjp for a backward run by
        # `manager`, where `sole[i]` says that parent i is a leaf this node alone sends a
        # gradient to; the grad of such a leaf may come back as `Finished` (callbacks applied).
        self.finish = finish
        # None, or the managers that see this node began before it (see `_HORIZON`)
        self.horizon = _HORIZON.get()

    def visible_to(self, start: int | None) -> bool:
        """Whether the backward of a manager that began recording at `start` goes through
        this node (None: any backward)."""
        return start is None or self.horizon is None or start < self.horizon

    def _holds(self, array: Any) -> bool:
        """Whether this node may still read the arrays its inputs held when it was recorded
        (`eager.core.ownership`): until a backward frees it."""
        return not self.freed

    def __repr__(self) -> str:
        return f"<Node {self.name} #{self.seq}{' freed' if self.freed else ''}>"


def parent_of(tensor: Any) -> Any:
    """The tape parent for a tracked tensor: its producing node's output, or itself if a leaf."""
    node = tensor._node
    return tensor if node is None else (node, tensor._out_idx)


def _check_alive(node: Node) -> None:
    if node.freed:
        raise BackwardError(
            f"the graph through op {node.name!r} was already freed by an earlier backward; "
            "run the forward again under the GradManager before calling backward"
        )


@contextlib.contextmanager
def recorded_below(start: int | None) -> Iterator[None]:
    """Within it, nodes recorded are seen by managers that began before `start` only (a
    recorded backward, run by the manager that began at `start`; None: by every manager)."""
    token = _HORIZON.set(start)
    try:
        yield
    finally:
        _HORIZON.reset(token)


def _reachable(starts: Sequence[Node], start: int | None = None) -> list[Node]:
    """The nodes behind `starts` that the backward of the manager begun at `start` sees."""
    seen: dict[int, Node] = {}
    stack = [n for n in starts if n.visible_to(start)]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        _check_alive(node)
        seen[id(node)] = node
        stack.extend(p[0] for p in node.parents if type(p) is tuple and p[0].visible_to(start))
    return sorted(seen.values(), key=lambda n: n.seq, reverse=True)


def _accumulate(store: list, index: int, g: Any) -> None:
    store[index] = g if store[index] is None else _add(store[index], g)


def backward(targets: Sequence[Any], cotangents: Sequence[Any], manager: Any = None,
             free: bool = True, start: int | None = None) -> dict[int, list]:
    """Run the backward pass from `targets` (tensors) seeded with `cotangents` (arrays).

    Returns `{id(leaf): [leaf, grad array, finished]}` for every leaf tensor reached, where
    `finished` says that `manager`'s callbacks were already applied to the grad (by a node's
    `finish`, given the GradManager running the backward). Every node traversed is freed (unless
    not `free`: another manager still records and may run its own backward through them): its
    residuals are dropped and a later backward through it raises `BackwardError`. `start`:
    the backward's manager began recording then; it does not go through nodes it cannot see.
    """
    leaves: dict[int, list] = {}

    def send(parent: Any, g: Any) -> None:
        if type(parent) is tuple:
            node, index = parent
            if not node.visible_to(start):
                return
            if node.cts is None:
                node.cts = [None] * len(node.out_avals)
            _accumulate(node.cts, index, g)
        else:
            entry = leaves.setdefault(id(parent), [parent, None, False])
            if type(g) is Finished:  # the leaf's only contribution (`_senders` made sure)
                entry[1], entry[2] = g.grad, True
            else:
                _accumulate(entry, 1, g)

    starts = []
    for t, ct in zip(targets, cotangents):
        if t._node is not None and t._node.visible_to(start):
            _check_alive(t._node)
            starts.append(t._node)
        send(parent_of(t), ct)
    order = _reachable(starts, start)
    senders = _senders(order, targets) if manager is not None else None
    try:
        for node in order:
            cts, node.cts = node.cts, None
            if cts is not None:
                pull = _pull if not _profiling.ON else _profiled_pull
                for parent, g in zip(node.parents, pull(node, cts, senders, manager, free)):
                    if g is not None:
                        send(parent, g)
    finally:
        _done(order, free)
    return leaves


def _done(order: Sequence[Node], free: bool) -> None:
    """After a backward: drop the pending cotangents and, if `free`, the nodes' residuals."""
    for node in order:
        node.cts = None
        if free:
            node.freed, node.vjp, node.parents, node.op = True, None, (), None


def _profiled_pull(node: Node, cts: list, senders: dict | None, manager: Any,
                   free: bool) -> Sequence[Any]:
    """`_pull` inside `eager.profile()`: timed as eager backward, by the node's op name."""
    with _profiling.timed("eager backward", node.name) as outs:
        grads = _pull(node, cts, senders, manager, free)
        outs.extend(g for g in grads if isinstance(g, jax.Array))
    return grads


def _pull(node: Node, cts: list, senders: dict | None, manager: Any,
          free: bool) -> Sequence[Any]:
    """The gradients `node` sends its parents for output cotangents `cts`."""
    if not node.sparse:
        cts = [jnp.zeros(s, d) if c is None else c for c, (s, d) in zip(cts, node.out_avals)]
    if senders is not None and node.finish is not None:
        sole = [type(p) is not tuple and senders[id(p)] == 1 for p in node.parents]
        grads = node.finish(cts, sole, manager)
    else:
        assert node.vjp is not None, node  # `_check_alive` refused a freed node before
        grads = node.vjp(cts)
    if _device.waits_for_spread_results():  # Note [CPU collectives in flight]
        _device.settle([g for g in grads if g is not None and not isinstance(g, tuple)])
    if free:
        node.vjp = None  # drop the residuals as soon as they are used
    return grads


def _senders(order: Sequence[Node], targets: Sequence[Any]) -> dict[int, int] | None:
    """How many places may send a gradient to each leaf: parent slots of the nodes about to
    run, and the targets themselves (an upper bound: a node may send it None). None when no
    node can finish gradients (the common case: nothing to count)."""
    if not any(node.finish is not None for node in order):
        return None
    count: dict[int, int] = {}
    for node in order:
        for p in node.parents:
            if type(p) is not tuple:
                count[id(p)] = count.get(id(p), 0) + 1
    for t in targets:
        if t._node is None:
            count[id(t)] = count.get(id(t), 0) + 1
    return count


def leaf_dependencies(tensors: Sequence[Any]) -> list[list[Any]]:
    """For each tensor, the leaf tensors reached through its recorded history (nodes are
    visited once for all tensors together, in sequence order)."""
    starts = [t._node for t in tensors if t._node is not None]
    nodes = sorted(_reachable_any(starts), key=lambda n: n.seq)
    deps: dict[int, dict[int, Any]] = {}
    for node in nodes:
        acc: dict[int, Any] = {}
        for p in node.parents:
            if type(p) is tuple:
                acc.update(deps[id(p[0])])
            else:
                acc[id(p)] = p
        deps[id(node)] = acc
    return [[] if t._node is None else list(deps[id(t._node)].values()) for t in tensors]


def _reachable_any(starts: Sequence[Node]) -> list[Node]:
    seen: dict[int, Node] = {}
    stack = list(starts)
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(p[0] for p in node.parents if type(p) is tuple)
    return list(seen.values())
