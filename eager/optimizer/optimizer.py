"""`Optimizer`: param groups, per-parameter state created up front, and state dicts.

Every update runs through the op dispatcher with the numeric hyper-parameters as inputs (read
through the active capture's `hyper` hook), so a capture sees the update and a schedule can
change `lr` without recompiling.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
import numpy as np

from .. import context
from ..tensor import Tensor, rebind


class Optimizer:
    """Base class: subclasses define `_init_state(param, group)` and `_update(params, group)`,
    which updates all `params` of one group that have a gradient (one fused op per group).

    Updates read numeric hyper-parameters through `self.hyper(group, key)`, so that a capture
    feeds them as inputs; `structural_hypers` names those whose zero-ness selects a different
    computation (a capture keys on it instead).
    """

    structural_hypers: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]):
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        for group in params if isinstance(params[0], dict) else [{"params": params}]:
            self.add_param_group(group)

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group: a dict with "params" and any hyper-parameters overriding the defaults."""
        group = {**self.defaults, **group}
        group["params"] = ps = list(group["params"])
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in ps:
            if not isinstance(p, Tensor):
                raise TypeError(f"{type(self).__name__} optimizes Tensors, got {type(p).__name__}")
            if id(p) in seen:
                raise ValueError("a parameter appears in more than one param group")
        self.param_groups.append(group)
        for p in ps:
            self.state[p] = self._init_state(p, group)
        context.bump_epoch()

    def _init_state(self, param: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        return {}

    def _update(self, params: list[Tensor], group: dict[str, Any]) -> None:
        raise NotImplementedError

    def hyper(self, group: dict[str, Any], key: str) -> Any:
        """The value of hyper-parameter `key` an update uses (an input during capture)."""
        value = group[key]
        h = context.current()
        return value if h is None else h.hyper(self, group, key, value)

    def step(self) -> Optimizer:
        """Update every parameter that has a gradient; returns self."""
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
        """Rebind each tensor to its updated value."""
        for t, n in zip(tensors, new):
            rebind(t, n._data)

    def state_dict(self) -> dict[str, Any]:
        """{"param_groups": hyper-parameters with parameter indices, "state": index -> arrays}."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = [{**{k: v for k, v in g.items() if k != "params"},
                   "params": [index[id(p)] for p in g["params"]]} for g in self.param_groups]
        state = {index[id(p)]: {k: t.numpy() for k, t in s.items()} for p, s in self.state.items()}
        return {"param_groups": groups, "state": state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore hyper-parameters and per-parameter state saved by `state_dict`."""
        groups = state["param_groups"]
        sizes = [len(g["params"]) for g in groups]
        if sizes != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"load_state_dict: saved param groups of sizes {sizes} do not match "
                             "this optimizer's")
        params = [p for g in self.param_groups for p in g["params"]]
        for g, own in zip(groups, self.param_groups):
            own.update({k: (tuple(v) if isinstance(v, list) else v)
                        for k, v in g.items() if k != "params"})
        for i, saved in state["state"].items():
            own_state = self.state[params[int(i)]]
            for k, v in saved.items():
                arr = np.asarray(v.numpy() if isinstance(v, Tensor) else v)
                if k in own_state:
                    rebind(own_state[k], jnp.asarray(arr, own_state[k].dtype))
                else:
                    own_state[k] = Tensor(arr)
                    context.bump_epoch()


__all__ = ["Optimizer"]
