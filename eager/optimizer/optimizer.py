"""`Optimizer`: param groups, per-parameter state created up front, and state dicts.

Every update runs through the op dispatcher with the numeric hyper-parameters as inputs (read
through the active capture's `hyper` hook), so a capture sees the update and a schedule can
change `lr` without recompiling.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any, NamedTuple

import jax

from ..core import context, frozen
from ..core.amp_policy import pending_skip
from ..core.device import commit
from ..core.errors import CheckpointError, OpArgumentError
from ..core.ops import OPS, Op
from ..core.ops.registry import prefetch
from ..core.tensors import Tensor, _wrap, apply, rebind
from ..serialization.layouts import fit


class ParamGroup(dict):
    """A param group: a dict (`"params"` and the hyper-parameters) that tells an active capture
    about writes, since a write inside a compiled region would happen only when it is captured
    (`sched.step()` inside an `xla_trace` step)."""

    __slots__ = ("owner",)

    def __init__(self, owner: Optimizer, items: dict[str, Any]):
        super().__init__(items)
        self.owner = weakref.ref(owner)

    def _written(self, key: str, value: Any) -> None:
        if (h := context.current()) is not None:
            h.hyper_write(self.owner(), self, key, value)

    def __setitem__(self, key: str, value: Any) -> None:
        self._written(key, value)
        super().__setitem__(key, value)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self._written(key, default)
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __reduce__(self) -> Any:  # pickles (and deep-copies) as the plain dict it holds
        return dict, (dict(self),)


class _Watched(dict):
    """Optimizer state (per parameter, and the map of parameters to it): replacing or adding
    a slot moves `eager.hooks.epoch()`, so compiled steps that read the old slot re-check."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        context.bump_epoch()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        context.bump_epoch()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        context.bump_epoch()

    def pop(self, *args: Any) -> Any:
        value = super().pop(*args)
        context.bump_epoch()
        return value

    def __reduce__(self) -> Any:
        return dict, (dict(self),)


class Fused(NamedTuple):
    """An update as one op call: `apply(op, *inputs, **attrs)`, whose outputs become `targets`
    (the parameters and state tensors it updates, in its output order)."""

    op: Op
    inputs: tuple
    attrs: dict[str, Any]
    targets: list[Tensor]


# What an optimizer takes: the tensors to update, or param groups (dicts with "params" and any
# hyper-parameters overriding the defaults)
Params = Iterable[Tensor] | Iterable[dict[str, Any]] | dict[str, Any] | Tensor


class Optimizer:
    """Base class: subclasses define `_init_state(param, group)` and `_update(params, group)`,
    which updates all `params` of one group that have a gradient (one fused op per group).

    Updates read numeric hyper-parameters through `self.hyper(group, key)`, so that a capture
    feeds them as inputs; `structural_hypers` names those whose zero-ness selects a different
    computation (a capture keys on it instead).
    """

    structural_hypers: tuple[str, ...] = ()

    def __init__(self, params: Params, defaults: dict[str, Any]):
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Tensor]] = _Watched()
        # MegEngine takes one group's dict, or one tensor, as well as an iterable of them
        items: list = [params] if isinstance(params, (dict, Tensor)) else list(params)
        if not items:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        for group in items if isinstance(items[0], dict) else [{"params": items}]:
            self.add_param_group(group)
        self._prefetch()

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group: a dict with "params" and any hyper-parameters overriding the defaults."""
        ps = list(group["params"])
        group = ParamGroup(self, {**self.defaults, **group, "params": ps})
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in ps:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__} optimizes Tensors, got {type(p).__name__}")
            if id(p) in seen:
                raise ValueError("a parameter appears in more than one param group")
        self.param_groups.append(group)
        for p in ps:
            self.state[p] = _Watched(self._init_state(p, group))
        context.bump_epoch()

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {}

    def _update(self, params: list[Tensor], group: dict[str, Any]) -> None:
        fused = self._fused(params, [p.grad for p in params], group)
        self._set(fused.targets, apply(fused.op, *fused.inputs, **fused.attrs))

    def _fused(self, params: list[Tensor], grads: list[Any], group: dict[str, Any]) -> Fused:
        """The one op call updating `params` of `group` given their `grads` (Tensors, or
        `jax.ShapeDtypeStruct`s when `_prefetch` asks ahead of any gradient)."""
        raise NotImplementedError

    def _prefetch(self) -> None:
        """Start getting each group's update program on the compile pool, for a step where
        every parameter has a gradient but those that require none or that a module reads as
        constants (`eager.core.frozen`: MegEngine's frozen batch norm): it compiles while the
        first step is captured, and that step's update waits for nothing (RetinaNet's first
        step ended with a 0.9 s compile of it). A step with other gradients compiles its own."""
        if context.current() is not None or type(self)._fused is Optimizer._fused:
            return
        constants = frozen.constant_parameters()
        for group in self.param_groups:
            params = [p for p in group["params"]
                      if p.requires_grad and not any(p is c for c in constants)]
            if not params:
                continue
            grads = [jax.ShapeDtypeStruct(p.shape, p.dtype) for p in params]
            try:
                fused = self._fused(params, grads, group)
            except Exception:  # noqa: BLE001 - a guess: the step itself raises, if anything
                continue
            prefetch(fused.op, tuple(fused.attrs.items()),
                     [x._data if isinstance(x, Tensor) else x for x in fused.inputs])

    def hyper(self, group: dict[str, Any], key: str) -> Any:
        """The value of hyper-parameter `key` an update uses (an input during capture)."""
        value = group[key]
        h = context.current()
        return value if h is None else h.hyper(self, group, key, value)

    def step(self) -> Optimizer:
        """Update every parameter that has a gradient; returns self. A Ctrl-C during the step
        takes effect after it: the updates donate the old buffers, so parameters and state are
        all updated or (before the first update starts) all untouched."""
        with context.atomic():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    self._update(params, group)
        return self

    def clear_grad(self) -> Optimizer:
        """Set every parameter's `.grad` to None; returns self."""
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
        return self

    zero_grad = clear_grad

    @staticmethod
    def _set(tensors: list[Tensor], new: tuple[Tensor, ...]) -> None:
        """Rebind each tensor to its updated value; inside a traced region where
        `amp.GradScaler` found a gradient not finite, to the old value (the step is skipped)."""
        found = pending_skip(context.current(), tensors)
        if found is not None:
            new = tuple(apply(OPS["where"], found, t, n) for t, n in zip(tensors, new))
        for t, n in zip(tensors, new):
            rebind(t, n)

    # hyper-parameters MegEngine's optimizer of the same name lacks: left out of `state_dict()`
    # while at these values, so MegEngine's `load_state_dict` (which wants its own keys) reads it
    megengine_absent: dict[str, Any] = {}

    def state_dict(self) -> dict[str, Any]:
        """{"param_groups": hyper-parameters with parameter indices, "state": index -> arrays},
        in MegEngine's layout (its group keys; a step count is a float32 scalar, as MegEngine
        and PyTorch keep it), which MegEngine's `load_state_dict` reads. A parameter without
        state has an empty entry: MegEngine writes none for plain SGD and then cannot load its
        own file (KeyError), while it loads one with the entries."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        absent = self.megengine_absent
        groups = [{**{k: v for k, v in g.items()
                      if k != "params" and not (k in absent and v == absent[k])},
                   "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
        state = {index[id(p)]: {k: _saved(k, t) for k, t in s.items()}
                 for p, s in self.state.items()}
        return {"param_groups": groups, "state": state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore hyper-parameters and per-parameter state saved by `state_dict`."""
        groups = state["param_groups"]
        sizes = [len(g["params"]) for g in groups]
        if sizes != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"load_state_dict: saved param groups of sizes {sizes} do not match "
                             "this optimizer's (a MegEngine RNN, LSTM or MultiHeadAttention "
                             "packs its weights into one parameter, which has no single "
                             "counterpart here)")
        params = [p for g in self.param_groups for p in g["params"]]
        with context.atomic():
            self._load(groups, state, params)

    def _load(self, groups: list, state: dict[str, Any], params: list) -> None:
        # every slot in the parameter's shape (MegEngine's layouts converted), checked before
        # anything is changed
        slots = [(int(i), k, fit(v, params[int(i)].shape))
                 for i, saved in state["state"].items() for k, v in saved.items()]
        for i, k, arr in slots:
            if k in self.state[params[i]]:
                _check_slot(k, i, arr.shape, self.state[params[i]][k].shape, params[i].shape)
        for g, own in zip(groups, self.param_groups):
            own.update({k: (tuple(v) if isinstance(v, list) else v)
                        for k, v in g.items() if k != "params"})
        for i, k, arr in slots:
            own_state = self.state[params[i]]
            if k in own_state:
                old = own_state[k]._data
                # (a new array made from numpy: updates may donate it)
                rebind(own_state[k], _wrap(commit(arr.astype(old.dtype), like=old)))
            else:
                own_state[k] = Tensor(arr)


def _saved(key: str, t: Tensor) -> Any:
    value = t.numpy()
    return value.astype("float32") if key == "step" else value


def _check_slot(key: str, i: int, got: tuple, want: tuple, param: tuple) -> None:
    if got != want:
        raise CheckpointError(
            f"load_state_dict: state {key!r} of parameter {i} has shape {got}, but this "
            f"optimizer's parameter {i} (shape {param}) keeps it as {want}. The state is matched "
            "to the parameters by position, as in MegEngine: build the optimizer over the "
            "parameters in the order the checkpoint's optimizer had them (`net.parameters()` "
            "gives MegEngine's order, by sorted name)")


def require(ok: bool, owner: str, name: str, value: Any, need: str) -> None:
    """Raise `OpArgumentError` naming hyper-parameter `name` of `owner` unless `ok`."""
    if not ok:
        raise OpArgumentError(f"{owner}: {name} must be {need}, got {value!r}")


__all__ = ["Optimizer"]
