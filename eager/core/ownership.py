"""Who else holds a tensor's array: the record that decides whether its buffer may be donated.

Optimizer updates and `xla_trace` steps donate the buffers of the tensors they replace, so a
step holds one copy of the parameters and state, not two. That is safe only when nothing will
read the old array again: no other Tensor holding it (`detach()`, a region's result that is
also written back), no raw array handed to code the framework cannot see (`eager.read`,
`__jax_array__`, dlpack), no recorded tape node a later backward runs.

Each Tensor carries the record of its current array in its `_holders` slot: None when it is
the array's only holder (an op's result, the common case, costs nothing), else a list shared by
every holder of that array, of weak references to them (a dead one holds nothing) and
`HANDED_OUT` once the array left for user code. The record changes where the framework
installs or hands out an array. A holder in it only may hold the array: whether it still does
is checked by buffer when a donation asks (`sole`), so registering one more than needed (inside
a capture, where tensors hold tracers) costs a list entry, never a wrong answer; missing one
would. A capture's snapshot keeps the record with the array it puts back. It is a fact the
framework keeps, not a count of Python references, so the answer is the same on every Python
and jax.
"""

from __future__ import annotations

import weakref
from typing import Any

_PRUNE_AT = 32  # a group this long drops the holders that let go when one joins


class _Group(list):
    """The weak references to the holders of one array; `limit`: the length at which the
    next join prunes it (doubled past what a prune keeps, so joins stay amortized O(1) while
    a forward pass records many nodes that read one parameter)."""

    __slots__ = ("limit",)

    def __init__(self, refs: list):
        super().__init__(refs)
        self.limit = _PRUNE_AT


class _HandedOut:
    """A holder that never lets go: the array was given to code the framework cannot see."""

    __slots__ = ()

    def __call__(self) -> _HandedOut:  # stands where a weak reference would
        return self

    def _holds(self, array: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "HANDED_OUT"


HANDED_OUT = _HandedOut()


def same_buffer(a: Any, b: Any) -> bool:
    """Whether arrays `a` and `b` are one buffer: the same object, or two jax arrays over the
    same memory (committing an array to its device makes a second object over its buffer)."""
    if a is b:
        return True
    try:
        return a.addressable_data(0).unsafe_buffer_pointer() == \
            b.addressable_data(0).unsafe_buffer_pointer()
    except (AttributeError, RuntimeError, ValueError, TypeError):  # a tracer, a deleted array
        return False


def _group(t: Any) -> _Group:
    group = t._holders
    if group is None:
        group = t._holders = _Group([weakref.ref(t)])
    return group


def sole(t: Any) -> bool:
    """Whether `t` is the only holder of its array, so that consuming the buffer (donation)
    destroys nothing anyone can still read."""
    if t._node is not None:  # ops recorded after it read it: they are not in the record
        return False
    group = t._holders
    if group is None:
        return True
    array = t._data
    for ref in group:
        h = ref()
        if h is not None and h is not t and h._holds(array):
            return False
    return True


def fresh(t: Any) -> None:
    """`t` now holds an array nothing else holds (an op's result just made for it)."""
    t._holders = None


def hand_out(t: Any) -> None:
    """`t`'s array was handed to code the framework cannot see: never donate it."""
    group = _group(t)
    if not any(ref is HANDED_OUT for ref in group):
        group.append(HANDED_OUT)


def share(dst: Any, src: Any) -> None:
    """`dst` now holds `src`'s array (a detached tensor, a result written back)."""
    group = _group(src)
    group.append(weakref.ref(dst))
    dst._holders = group
    if src._node is not None:  # the nodes that read a result are not in its record
        hand_out(src)


def hold(t: Any, holder: Any) -> None:
    """`holder` (a tape node: anything with `_holds(array)` and weak references) keeps `t`'s
    array until it lets go. Only a leaf's record needs the nodes that read it: the array of a
    tensor with gradient history is never donated, nor is it once shared (`sole`, `share`), so
    the many ops that read a forward pass's results skip this."""
    group = _group(t)
    if len(group) >= group.limit:
        array = t._data
        group[:] = [ref for ref in group if (h := ref()) is not None and (
            h is t or h._holds(array))]
        group.limit = max(_PRUNE_AT, 2 * len(group))
    group.append(weakref.ref(holder))


def record(t: Any) -> list | None:
    """What `restore_record` puts back after a rollback gives `t` an earlier array again."""
    return t._holders


def restore_record(t: Any, group: list | None) -> None:
    """Give `t` the record `record(t)` returned, with `t` among that array's holders again."""
    t._holders = group
    if group is not None and not any(ref() is t for ref in group):
        group.append(weakref.ref(t))
