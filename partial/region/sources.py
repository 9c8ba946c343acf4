"""What a captured region reads and does, as typed objects: a new kind of input or effect is
one class, and both engines (the capture and the lazy recorder) share them.

- *Input sources*: where a call finds the value of an input beyond the Tensor arguments: a
  tensor that existed before the region (`Lifted`), the current `.grad` of a tensor
  (`GradSlot`), a numeric optimizer setting (`Hyper`). Each knows how to fetch it afresh.
- *Values*: what an output leaf, or a value written back, stands for: a program result
  (`Result`), a Tensor argument (`Argument`), an object held by reference (`Held`), the current
  `.grad` of a tensor (`GradOf`), a plain value (`Constant`). Each has `get(outs, call)`.
- *Effects*: what a call does after the program ran: give a tensor new storage (`Rebind`), set
  a `.grad` (`SetGrad`), set a module attribute (`SetAttr`). Each has `apply(outs, call)`.

Everything is held by weak reference: a source whose tensor died fetches None, and the entry
holding it cannot serve the call (it is dropped and the region captured anew).
"""

from __future__ import annotations

import weakref
from typing import Any

import jax

import eager as eg

_rebind, _peek, _data, _history = eg.rebind, eg.hooks.peek, eg.hooks.data, eg.hooks.history


# ----- input sources -------------------------------------------------------------------------
class Lifted:
    """A tensor the region reads that existed before it (a parameter, buffer, closure or global
    tensor, optimizer state, the RNG key): its storage is read at every call."""

    order = 0  # a call gathers sources kind by kind, in this order
    __slots__ = ("ref",)

    def __init__(self, t: Any):
        self.ref = weakref.ref(t)

    def target(self) -> Any:
        return self.ref()


class GradSlot:
    """The `.grad` of a tensor, as it is at each call (the tensor in it may be replaced)."""

    order = 1
    __slots__ = ("owner",)

    def __init__(self, owner: Any):
        self.owner = weakref.ref(owner)

    def target(self) -> Any:
        return self.owner()


class Hyper:
    """A numeric setting of an optimizer's param group (`lr`, one of `betas`, ...), read at
    every call so a schedule changes it without recompiling."""

    order = 2
    __slots__ = ("optimizer", "group", "key", "element", "last", "value")

    def __init__(self, optimizer: Any, group: int, key: str, element: int | None):
        self.optimizer = weakref.ref(optimizer)
        self.group, self.key, self.element = group, key, element
        self.last: Any = None
        self.value: Any = None

    def target(self) -> Any:
        return None  # not a tensor: nothing to watch

    def array(self) -> Any:
        """The setting now, as a 0-d array (made anew only when it changed); None when the
        optimizer is gone."""
        opt = self.optimizer()
        if opt is None:
            return None
        v = opt.param_groups[self.group][self.key]
        if self.element is not None:
            v = v[self.element]
        if v != self.last or self.value is None:
            # device_put, not jnp.asarray: that stages the value through a small program,
            # compiled on first use in every process (the same weakly typed float32 array)
            self.last, self.value = v, jax.device_put(float(v))
        return self.value


Source = Lifted | GradSlot | Hyper  # an input source of any kind


# ----- values ----------------------------------------------------------------------------------
class Result:
    """Output `index` of the compiled program; with `length`, the padded storage of a ragged
    tensor (a data-dependent selection) whose logical length is output `length`; with
    `qdtype`, the integer storage of a quantized tensor of that dtype (qint8(scale), ...)."""

    __slots__ = ("index", "length", "qdtype")

    def __init__(self, index: int, length: int | None = None, qdtype: Any = None):
        self.index, self.length, self.qdtype = index, length, qdtype

    def get(self, outs: list, call: Any) -> Any:
        t = outs[self.index]
        if self.length is not None:
            eg.hooks.set_ragged_length(t, _data(outs[self.length]))
        if self.qdtype is not None:
            eg.hooks.set_quantized_dtype(t, self.qdtype)
        return t


class Argument:
    """Tensor argument `index` of the call (in flattening order)."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def get(self, outs: list, call: Any) -> Any:
        return call.tensors[self.index]


class Held:
    """An object (a tensor, Module or Optimizer) the region returns or writes, by reference."""

    __slots__ = ("ref",)

    def __init__(self, obj: Any):
        self.ref = weakref.ref(obj)

    def get(self, outs: list, call: Any) -> Any:
        return self.ref()


class GradOf:
    """The current `.grad` of a tensor."""

    __slots__ = ("owner",)

    def __init__(self, owner_ref: weakref.ref):
        self.owner = owner_ref

    def get(self, outs: list, call: Any) -> Any:
        owner = self.owner()
        return None if owner is None else owner.grad


class Constant:
    """A plain value the region returns or assigns."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def get(self, outs: list, call: Any) -> Any:
        return self.value


# ----- effects ---------------------------------------------------------------------------------
class Rebind:
    """Give a tensor (an argument, a tensor by reference, or the tensor in a `.grad` slot) the
    storage and gradient history of `value`."""

    __slots__ = ("target", "value")

    def __init__(self, target: Argument | Held | GradOf, value: Result):
        self.target, self.value = target, value

    def apply(self, outs: list, call: Any) -> None:
        t = self.target.get(outs, call)
        if t is not None:
            take_value(t, self.value.get(outs, call))


def take_value(t: Any, v: Any) -> None:
    """Give `t` the value (as an op reads it) and gradient history of the result `v`: `t`
    shares `v`'s array, so its buffer may still be donated once `v` is dropped."""
    exact = _peek(v)
    _rebind(t, v if exact is _data(v) else exact, *_history(v))


class SetGrad:
    """Set the `.grad` of a tensor to `value` (a Tensor or None)."""

    __slots__ = ("owner", "value")

    def __init__(self, owner: Any, value: Any):
        self.owner, self.value = weakref.ref(owner), value

    def apply(self, outs: list, call: Any) -> None:
        owner = self.owner()
        if owner is not None:
            owner.grad = self.value.get(outs, call)


class SetAttr:
    """Set attribute `name` of a module (a tensor the region stored on it, `self.last = h`)."""

    __slots__ = ("module", "name", "value")

    def __init__(self, module: Any, name: str, value: Any):
        self.module, self.name, self.value = weakref.ref(module), name, value

    def apply(self, outs: list, call: Any) -> None:
        module = self.module()
        if module is not None:
            object.__setattr__(module, self.name, self.value.get(outs, call))
