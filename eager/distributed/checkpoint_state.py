"""A state as a sharded checkpoint sees it (see `checkpoint`'s Note [sharded checkpoint
format]): `describe` turns a nested state into a JSON layout plus named arrays on save;
`match` checks a target state against a saved layout and plans which arrays to read onto which
shardings; `Plan.apply` rebinds the targets.

The layout's nodes, each a JSON object:

    {"value": v}                          an int, float, bool, str or None
    {"dict": [[key, node], ...]}          keys as JSON scalars (so int keys stay ints)
    {"list": [node, ...]}, {"tuple": [node, ...]}
    {"array": name, "kind": "tensor" | "jax" | "numpy", "shape": [...], "dtype": "float32"}
    {"module": class, "tensors": {dotted name: array node}}
    {"optimizer": class, "param_groups": [{hyper-parameter: value, "params": [index, ...]}],
     "state": [[index, {slot: array node}], ...]}

An array's name is its place in the state, as error messages give it:
`state['model'].fc1.weight`, `state['opt'].state[0]['exp_avg']`. An optimizer's state is keyed
by the position of its parameter across `param_groups`, as `Optimizer.state_dict` keys it.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ..core.device import commit
from ..core.errors import CheckpointError
from ..core.tensors import Tensor, peek, rebind
from ..module.module import Module
from ..optimizer.optimizer import Optimizer

PLAIN = (bool, int, float, str, type(None))
_KINDS = {"value": "a plain value", "dict": "a dict", "list": "a list", "tuple": "a tuple",
          "array": "an array", "module": "a Module", "optimizer": "an Optimizer"}
_SAME_STRUCTURE = "load into a state of the same structure as the one saved"


# ----- save ------------------------------------------------------------------------------------
def describe(obj: Any, path: str, arrays: dict[str, Any]) -> Any:
    """The layout node of `obj` (at `path` in the state); its arrays are added to `arrays`."""
    if isinstance(obj, Module):
        tensors = dict(obj.named_parameters()) | dict(obj.named_buffers())
        return {"module": type(obj).__name__, "tensors": {
            n: _array(peek(t), "tensor", f"{path}.{n}", arrays) for n, t in tensors.items()}}
    if isinstance(obj, Optimizer):
        return _describe_optimizer(obj, path, arrays)
    if isinstance(obj, Tensor):
        return _array(peek(obj), "tensor", path, arrays)
    if isinstance(obj, jax.Array):
        return _array(obj, "jax", path, arrays)
    if isinstance(obj, (np.ndarray, np.generic)):
        return _array(np.asarray(obj), "numpy", path, arrays)
    if isinstance(obj, PLAIN):
        return {"value": obj}
    if isinstance(obj, dict):
        return {"dict": [[_key(k, path), describe(v, f"{path}[{k!r}]", arrays)]
                         for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {"tuple" if isinstance(obj, tuple) else "list": [
            describe(v, f"{path}[{i}]", arrays) for i, v in enumerate(obj)]}
    raise CheckpointError(
        f"save_checkpoint: {path} is a {type(obj).__name__}, which a checkpoint cannot hold; "
        "it holds dicts, lists and tuples of Modules, Optimizers, Tensors, jax and numpy "
        "arrays, ints, floats, bools, strings and None (convert the value to one of these)")


def _array(arr: Any, kind: str, path: str, arrays: dict[str, Any]) -> dict[str, Any]:
    if isinstance(arr, jax.core.Tracer):
        raise CheckpointError(f"save_checkpoint: {path} is being traced (the call is inside a "
                              "compiled region); save outside `partial_trace`/`xla_trace`")
    if arr.dtype.kind in "OUS":
        raise CheckpointError(f"save_checkpoint: {path} is a numpy array of dtype {arr.dtype}; "
                              "a checkpoint holds arrays of numbers and booleans only (store "
                              "strings as plain str values)")
    arrays[path] = arr
    return {"array": path, "kind": kind, "shape": list(arr.shape), "dtype": str(arr.dtype)}


def _key(key: Any, path: str) -> Any:
    if not isinstance(key, PLAIN):
        raise CheckpointError(f"save_checkpoint: a key of the dict at {path} is a "
                              f"{type(key).__name__} ({key!r}); use str or int keys")
    return key


def _describe_optimizer(opt: Optimizer, path: str, arrays: dict[str, Any]) -> dict[str, Any]:
    params = [p for g in opt.param_groups for p in g["params"]]
    index = {id(p): i for i, p in enumerate(params)}
    groups = [{**{k: _hyper(v, f"{path}.param_groups[{g}][{k!r}]")
                  for k, v in group.items() if k != "params"},
               "params": [index[id(p)] for p in group["params"]]}
              for g, group in enumerate(opt.param_groups)]
    state = [[i, {k: _array(peek(t), "tensor", f"{path}.state[{i}][{k!r}]", arrays)
                  for k, t in opt.state.get(p, {}).items()}] for i, p in enumerate(params)]
    return {"optimizer": type(opt).__name__, "param_groups": groups, "state": state}


def _hyper(value: Any, path: str) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, PLAIN) for v in value):
        return list(value)
    raise CheckpointError(f"save_checkpoint: hyper-parameter {path} is a "
                          f"{type(value).__name__}; a checkpoint holds hyper-parameters that "
                          "are ints, floats, bools, strings, None or tuples of them")


# ----- load ------------------------------------------------------------------------------------
class _Ref:
    """A leaf of `load_checkpoint`'s result that is an array read from the checkpoint."""

    __slots__ = ("like", "name")

    def __init__(self, name: str, like: Any) -> None:
        self.name, self.like = name, like


class Plan:
    """What a load reads (array name -> shape, dtype and the sharding to read it onto, None
    for a host array) and rebinds, gathered while the target is matched to the layout."""

    def __init__(self, where: str) -> None:
        self.where = where  # "step 3 of '/ckpt'", for messages
        self.reads: dict[str, tuple[tuple[int, ...], np.dtype, Any]] = {}
        self.tensors: list[tuple[Tensor, str]] = []
        self.hypers: list[tuple[dict, dict]] = []

    def error(self, path: str, what: str, fix: str) -> CheckpointError:
        return CheckpointError(f"load_checkpoint: {path} {what} in {self.where}; {fix}")

    def read(self, node: Any, like: Any, path: str) -> str:
        """Plan to read the array of layout `node` onto the sharding of array `like`."""
        node = expect(node, "array", path, self)
        shape, dtype = tuple(node["shape"]), node["dtype"]
        if shape != tuple(like.shape):
            raise self.error(path, f"has shape {shape} in the checkpoint but {tuple(like.shape)} "
                             "here", "build the target with the sizes it was saved with")
        if dtype != str(like.dtype):
            raise self.error(path, f"has dtype {dtype} in the checkpoint but {like.dtype} here",
                             f"a checkpoint is not cast on load: load into a {dtype} target "
                             "and cast after loading")
        committed = isinstance(like, jax.Array) and like.committed
        self.reads[node["array"]] = (shape, like.dtype, like.sharding if committed else None)
        return node["array"]

    def tensor(self, t: Tensor, node: Any, path: str) -> None:
        self.tensors.append((t, self.read(node, peek(t), path)))

    def apply(self, result: Any, loaded: dict[str, Any]) -> Any:
        """Rebind every planned tensor and hyper-parameter (call inside `context.atomic()`);
        returns `result` with its arrays filled in. Every new array is made before the first
        rebind."""
        result = _fill(result, loaded)
        new = [(t, _placed(loaded[name], peek(t))) for t, name in self.tensors]
        for group, hypers in self.hypers:
            group.update(hypers)
        for t, arr in new:
            rebind(t, arr)
        return result


def expect(node: Any, kind: str, path: str, plan: Plan) -> dict[str, Any]:
    """`node` if it is a layout node of `kind`, else a `CheckpointError` saying what it is."""
    if isinstance(node, dict) and kind in node:
        return node
    found = next((v for k, v in _KINDS.items() if isinstance(node, dict) and k in node),
                 "not a layout entry")
    raise plan.error(path, f"is {found} in the checkpoint but {_KINDS[kind]} here",
                     _SAME_STRUCTURE)


def match(target: Any, node: Any, path: str, plan: Plan) -> Any:
    """Check `target` against layout `node` and add its reads to `plan`; returns the result's
    structure (arrays read later as `_Ref`s, Modules, Optimizers and Tensors as themselves)."""
    if isinstance(target, Module):
        return _match_module(target, node, path, plan)
    if isinstance(target, Optimizer):
        return _match_optimizer(target, node, path, plan)
    if isinstance(target, Tensor):
        plan.tensor(target, node, path)
        return target
    if isinstance(target, (jax.Array, np.ndarray, np.generic)):
        return _Ref(plan.read(node, target, path), target)
    if isinstance(target, PLAIN):
        return expect(node, "value", path, plan)["value"]
    if isinstance(target, dict):
        saved = dict((k, v) for k, v in expect(node, "dict", path, plan)["dict"])
        missing = [k for k in target if k not in saved]
        if missing:
            raise plan.error(f"{path}[{missing[0]!r}]", "is missing", f"the saved keys there "
                             f"are {list(saved)}; leave it out of the state you load into")
        return {k: match(v, saved[k], f"{path}[{k!r}]", plan) for k, v in target.items()}
    if isinstance(target, (list, tuple)):
        kind = "list" if isinstance(node, dict) and "list" in node else "tuple"
        items = expect(node, kind, path, plan)[kind]
        if len(items) != len(target):
            raise plan.error(path, f"has {len(items)} entries in the checkpoint but "
                             f"{len(target)} here", _SAME_STRUCTURE)
        out = [match(v, n, f"{path}[{i}]", plan) for i, (v, n) in enumerate(zip(target, items))]
        return tuple(out) if isinstance(target, tuple) else out
    raise CheckpointError(f"load_checkpoint: {path} is a {type(target).__name__}, which a "
                          "checkpoint cannot hold (see `save_checkpoint`)")


def _match_module(m: Module, node: Any, path: str, plan: Plan) -> Module:
    saved = expect(node, "module", path, plan)["tensors"]
    own = dict(m.named_parameters()) | dict(m.named_buffers())
    missing, unexpected = sorted(own.keys() - saved.keys()), sorted(saved.keys() - own.keys())
    if missing or unexpected:
        raise plan.error(path, f"(a {type(m).__name__}) lacks {missing} and has {unexpected} "
                         f"more than the saved {node['module']}", "load into a module of the "
                         "architecture that was saved")
    for name, t in own.items():
        plan.tensor(t, saved[name], f"{path}.{name}")
    return m


def _match_optimizer(opt: Optimizer, node: Any, path: str, plan: Plan) -> Optimizer:
    saved = expect(node, "optimizer", path, plan)
    sizes = [len(g["params"]) for g in saved["param_groups"]]
    if sizes != [len(g["params"]) for g in opt.param_groups]:
        raise plan.error(path, f"has param groups of sizes {sizes} in the checkpoint but "
                         f"{[len(g['params']) for g in opt.param_groups]} here", "build the "
                         "optimizer over the same parameters, groups and order as the saved one")
    for group, own in zip(saved["param_groups"], opt.param_groups):
        plan.hypers.append((own, {k: (tuple(v) if isinstance(v, list) else v)
                                  for k, v in group.items() if k != "params"}))
    slots = {int(i): s for i, s in saved["state"]}
    for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
        own_slots, saved_slots = opt.state.get(p, {}), slots.get(i, {})
        if own_slots.keys() != saved_slots.keys():
            raise plan.error(f"{path}.state[{i}]", f"has slots {sorted(saved_slots)} in the "
                             f"checkpoint but {sorted(own_slots)} here", "load into an "
                             f"optimizer of the saved type ({saved['optimizer']}) and settings")
        for k, t in own_slots.items():
            plan.tensor(t, saved_slots[k], f"{path}.state[{i}][{k!r}]")
    return opt


def _placed(array: Any, like: Any) -> Any:
    """`array` as read, in the form of the target `like`: a numpy scalar for one, the array
    itself when it was read onto `like`'s sharding, else (an uncommitted target) placed as
    `device.commit` places new arrays (Note [committed arrays])."""
    if isinstance(like, np.generic):
        return np.asarray(array)[()]
    if isinstance(like, np.ndarray) or (isinstance(like, jax.Array) and like.committed):
        return array
    return commit(array, like=like)


def _fill(obj: Any, loaded: dict[str, Any]) -> Any:
    if isinstance(obj, _Ref):
        return _placed(loaded[obj.name], obj.like)
    if isinstance(obj, dict):
        return {k: _fill(v, loaded) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = [_fill(v, loaded) for v in obj]
        return tuple(out) if isinstance(obj, tuple) else out
    return obj
