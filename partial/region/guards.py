"""Guards: the conditions a compiled entry depends on besides its key, one class each.

Every guard has `check() -> str | None`: None while it holds, otherwise why it failed (the
reason the recompile warning and `explain()` give). No guard keys anything by `id()` of an
object that may die (Python reuses the id of a freed object, so an id-keyed guard would match
a different object later): objects are held by weak reference and compared by identity
(`Same`), plain values by value, NaN equal to NaN (`value_token`).

Structure guards (modules, an optimizer's state tensors) can only fail after a structure change
anywhere in the process (`eager.hooks.epoch()` moved), so an entry checks them only then; the
other guards are checked on every call.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import eager.module as M
import eager.optimizer as optim

PLAIN = (bool, int, str, bytes, type(None))


class Same:
    """A token equal to another that names the same object: a new object never equals a dead
    one, whatever its id (the tokens made for one object share its weak reference).

    It holds a weak reference (a strong one for objects that cannot have one, which keeps them
    alive, so their identity cannot be reused); hashes by identity.

    >>> import eager.module as M
    >>> m = M.Linear(1, 1)
    >>> Same(m) == Same(m), Same(m) == Same(M.Linear(1, 1))
    (True, False)
    """

    __slots__ = ("ref", "hash")

    def __init__(self, obj: Any):
        self.ref: Callable[[], Any]  # the object, or None once it died
        try:
            self.ref = weakref.ref(obj)
        except TypeError:
            self.ref = _Strong(obj)
        self.hash = id(obj)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if type(other) is not Same:
            return False
        if self.ref is other.ref:  # one weak reference per object: the same object, even dead
            return True            # (so a key holding it still finds itself in a dict)
        obj = self.ref()
        return obj is not None and obj is other.ref()

    def __repr__(self) -> str:
        obj = self.ref()
        return "<dead object>" if obj is None else f"<the same {type(obj).__name__}>"


class _Strong:
    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def value_token(v: Any) -> Any:
    """A hashable stand-in for `v` that compares as the guards want: plain values and numpy
    scalars by type and value (NaN equal to NaN), containers element-wise, anything else by
    identity, weakly."""
    if isinstance(v, PLAIN):
        return (type(v), v)
    if isinstance(v, (float, complex, np.generic)):
        x = v.item() if isinstance(v, np.generic) else v
        if isinstance(x, float) and math.isnan(x):
            return (type(v), "nan")
        if isinstance(x, complex) and (math.isnan(x.real) or math.isnan(x.imag)):
            return (type(v), "nan", repr(x))
        return (type(v), x)
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(value_token(e) for e in v))
    if isinstance(v, dict):
        return (dict, tuple((k, value_token(e)) for k, e in v.items()))
    return Same(v)


# ----- modules ---------------------------------------------------------------------------------
def module_signature(m: M.Module, exclude: Iterable[str] = ()) -> tuple:
    """Every attribute of `m` as a token (Tensors, Modules and other objects by identity, plain
    values by value), except `exclude` (attributes a region itself writes) and the derived
    `structure_version`."""
    skip = set(exclude) | {"structure_version"}
    return tuple((k, value_token(v)) for k, v in vars(m).items() if k not in skip)


class ModuleGuard:
    """A module the region uses has the attributes (and training flag) it had at capture."""

    structural = True
    __slots__ = ("ref", "exclude", "signature")

    def __init__(self, module: M.Module, exclude: frozenset):
        self.ref = weakref.ref(module)
        self.exclude = exclude
        self.signature = module_signature(module, exclude)

    def check(self) -> str | None:
        m = self.ref()
        if m is None:
            return "a module the region uses no longer exists"
        new = module_signature(m, self.exclude)
        return None if new == self.signature else _module_change(m, self.signature, new)

    def describe(self) -> str:
        m = self.ref()
        return f"{type(m).__name__} (training={getattr(m, 'training', '?')}) keeps its attributes"


def _module_change(m: M.Module, old: tuple, new: tuple) -> str:
    before, after = dict(old), dict(new)
    for k in before.keys() | after.keys():
        if before.get(k, "<missing>") != after.get(k, "<missing>"):
            if k == "training":
                return f"{type(m).__name__}.training changed from {before[k][1]} to " \
                       f"{after[k][1]}"
            return f"attribute `{k}` of a {type(m).__name__} was reassigned"
    return f"a {type(m).__name__} changed"


# ----- optimizers ------------------------------------------------------------------------------
def optimizer_keys(opt: optim.Optimizer) -> tuple:
    """The settings of each param group (all keys but "params")."""
    return tuple(tuple(k for k in g if k != "params") for g in opt.param_groups)


def optimizer_signature(opt: optim.Optimizer, inputs: frozenset, keys: tuple) -> tuple:
    """The structure of `opt`'s param groups: per group its size, the value of every
    setting the region baked in, and, for settings it reads as inputs (`inputs` holds their
    (group index, key)), only what selects a different computation (the zero-ness of the
    optimizer's `structural_hypers`, e.g. SGD's momentum). `keys` (per group, at capture)
    limits it to the settings that existed then: one added later (a scheduler's `initial_lr`)
    cannot have been read by the region."""
    structural = getattr(opt, "structural_hypers", ())
    if len(keys) != len(opt.param_groups):
        return ("groups", len(opt.param_groups))
    groups = []
    for gi, (g, group_keys) in enumerate(zip(opt.param_groups, keys)):
        items = []
        for k in group_keys:
            v = g.get(k, "<missing>")
            if (gi, k) in inputs:
                items.append((k, bool(v) if k in structural else _input_shape(v)))
            else:
                items.append((k, value_token(v)))
        groups.append((len(g["params"]), tuple(items)))
    return tuple(groups)


def _input_shape(v: Any) -> Any:
    return ("input",) * len(v) if isinstance(v, (tuple, list)) else "input"


def optimizer_state_signature(opt: optim.Optimizer) -> tuple:
    """Which state tensors exist per parameter, by identity."""
    return tuple((Same(p), tuple((k, Same(t)) for k, t in s.items()))
                 for p, s in opt.state.items())


class OptimizerGuard:
    """An optimizer's param groups keep their parameters, structural choices and the
    settings the region baked in (numeric hyper-parameters are inputs and may change)."""

    structural = False
    __slots__ = ("ref", "inputs", "keys", "signature", "params")

    def __init__(self, opt: optim.Optimizer, inputs: frozenset):
        self.ref = weakref.ref(opt)
        self.inputs = inputs
        self.keys = optimizer_keys(opt)
        self.signature = optimizer_signature(opt, inputs, self.keys)
        # The parameters by weak reference (one per tensor, reused by every weakref.ref call),
        # compared by identity: no token objects built on every call.
        self.params = [[weakref.ref(p) for p in g["params"]] for g in opt.param_groups]

    def _same_params(self, opt: optim.Optimizer) -> bool:
        for refs, g in zip(self.params, opt.param_groups):
            for r, p in zip(refs, g["params"]):
                if r() is not p:
                    return False
        return True

    def check(self) -> str | None:
        opt = self.ref()
        if opt is None:
            return "an optimizer the region uses no longer exists"
        if optimizer_signature(opt, self.inputs, self.keys) != self.signature \
                or not self._same_params(opt):
            return "an optimizer's param groups changed (a setting the region bakes in, a " \
                   "structural choice such as momentum on/off, or the groups)"
        return None

    def describe(self) -> str:
        return f"{type(self.ref()).__name__} keeps its param groups' structure"


class OptimizerStateGuard:
    """An optimizer's state tensors (momentum buffers, Adam moments, step counts) are the same
    tensors as before the capture: replacing one (`opt.state[p]["momentum_buffer"] = t`)
    captures anew, since the region reads the old one."""

    structural = True
    __slots__ = ("ref", "signature")

    def __init__(self, opt: optim.Optimizer, signature: tuple):
        self.ref = weakref.ref(opt)
        self.signature = signature

    def check(self) -> str | None:
        opt = self.ref()
        if opt is None or optimizer_state_signature(opt) != self.signature:
            return "an optimizer's state tensors changed (a slot was replaced, or parameters " \
                   "or state were added)"
        return None

    def describe(self) -> str:
        return f"{type(self.ref()).__name__} keeps its state tensors"


# ----- .grad slots, GradManagers, arguments ----------------------------------------------------
class GradPresenceGuard:
    """A `.grad` slot the region reads before writing it is set (or None) as at capture."""

    structural = False
    __slots__ = ("ref", "had")

    def __init__(self, owner: Any, had: bool):
        self.ref = weakref.ref(owner)
        self.had = had

    def check(self) -> str | None:
        owner = self.ref()
        if owner is None:
            return "a tensor whose .grad the region reads no longer exists"
        if (owner.grad is not None) != self.had:
            return f"the .grad of a tensor of shape {owner.shape} " \
                   f"{'is now None' if self.had else 'is now set'}"
        return None

    def describe(self) -> str:
        return f".grad {'set' if self.had else 'None'} on a tensor the region reads"


class ManagerGuard:
    """A GradManager whose backward the region runs attaches the same tensors and callbacks
    as at capture (its `version` moves on every `attach`, attached tensor's death and
    `requires_grad` change)."""

    structural = False
    __slots__ = ("ref", "version")

    def __init__(self, manager: Any):
        self.ref = weakref.ref(manager)
        self.version = manager.version

    def check(self) -> str | None:
        gm = self.ref()
        if gm is None:
            return "a GradManager the region uses no longer exists"
        if gm.version != self.version:
            return "what a GradManager differentiates changed since the capture (an attach, " \
                   "an attached tensor freed, or a tensor's requires_grad set)"
        return None

    def describe(self) -> str:
        return "a GradManager attaches the same tensors"


class ArgumentStateGuard:
    """Which Tensor arguments are also state the region reads (a parameter passed as an
    argument), as at capture: those alias an input and an output."""

    structural = False
    __slots__ = ("state", "args")

    def __init__(self, state: dict, tensors: list):
        self.state = {k: weakref.ref(t) for k, t in state.items()}  # id -> weak reference
        self.args = [self._is_state(t) for t in tensors]

    def _is_state(self, t: Any) -> Any:
        ref = self.state.get(id(t))
        return ref if ref is not None and ref() is t else None

    def check_call(self, tensors: list) -> str | None:
        for t, was in zip(tensors, self.args):
            now = self._is_state(t)
            if (now is None) != (was is None) or (now is not None and now() is not was()):
                return "a tensor argument is now a parameter, buffer or optimizer state " \
                       "tensor the region also reads (or no longer is)"
        return None

    def any_state(self, tensors: list) -> bool:
        """Whether one of `tensors` is state the region reads (the entry's slow path)."""
        state = self.state
        for t in tensors:  # a loop, not any(<generator>): this runs on every call
            ref = state.get(id(t))
            if ref is not None and ref() is t:
                return True
        return False

    def describe(self) -> str:
        return f"{sum(a is not None for a in self.args)} tensor arguments are state tensors"
