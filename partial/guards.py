"""Guard keys and conditions: what a compiled entry depends on besides its code.

`flatten_call` turns the arguments of a call into a hashable key (tree structure; per Tensor its
abstract value: shape, dtype and weak type; which arguments are the same tensor; the identity of
Module and Optimizer arguments; the value of every plain Python value) and the lists the entry
needs (Tensors and their arrays, objects). `module_signature` and `optimizer_signature`
summarize what a region's modules and optimizers look like, so an entry can tell when they
changed shape.
`describe_change` says, for the recompilation warning, which argument or leaf changed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

import eager as eg
import eager.module as M
import eager.optimizer as optim

from .errors import UnsupportedArgumentError

STATIC_TYPES = (bool, int, float, complex, str, bytes, type(None))  # plain values: keyed by value
_Tensor, _Module, _Optimizer = eg.Tensor, M.Module, optim.Optimizer
_read = eg.read


class Call:
    """The flattened arguments of one call."""

    __slots__ = ("key", "leaves", "treedef", "tensors", "arrays", "objects")

    def __init__(self, key: tuple, leaves: list, treedef: Any, tensors: list, arrays: list,
                 objects: list):
        self.key, self.leaves, self.treedef = key, leaves, treedef
        self.tensors, self.arrays, self.objects = tensors, arrays, objects


_TENSOR_TYPES = (eg.Tensor, eg.Parameter)
_POSITIONAL_TREEDEFS: dict[int, Any] = {}
_placed: bool | None = None  # whether tensors can live on different devices in this process


def _placement_matters() -> bool:
    """True with several devices, or on an accelerator (whose process also has a CPU)."""
    global _placed
    if _placed is None:
        devices = jax.devices()
        _placed = len(devices) > 1 or devices[0].platform != "cpu"
    return _placed


def tensor_spec(a: Any) -> Any:
    """What the key records of a tensor argument's array: its abstract value (shape, dtype,
    weak type) and, where tensors can live on different devices, its placement."""
    return (a.aval, a.sharding) if _placement_matters() else a.aval


def flatten_call(args: tuple, kwargs: dict) -> Call:
    """Flatten `(args, kwargs)` into a `Call`. Tensors appearing twice are one input."""
    if not kwargs and _distinct_tensors(args):
        return _positional_tensors(args)
    leaves, treedef = jax.tree.flatten((args, kwargs))
    spec: list = []
    tensors: list = []
    arrays: list = []
    objects: list = []
    seen: dict[int, int] | None = None
    for x in leaves:
        if isinstance(x, _Tensor):
            if tensors:
                if seen is None:
                    seen = {id(t): i for i, t in enumerate(tensors)}
                first = seen.get(id(x))
                if first is not None:
                    spec.append(("same as tensor", first))
                    continue
                seen[id(x)] = len(tensors)
            a = _read(x)
            tensors.append(x)
            arrays.append(a)
            spec.append(tensor_spec(a))
        elif isinstance(x, (_Module, _Optimizer)):
            objects.append(x)
            spec.append((type(x), id(x)))
        elif isinstance(x, STATIC_TYPES):
            spec.append((type(x), x))
        elif isinstance(x, np.generic):
            spec.append((type(x), x.item()))
        else:
            raise _unsupported(args, kwargs, x)
    return Call((treedef, tuple(spec)), leaves, treedef, tensors, arrays, objects)


def _distinct_tensors(args: tuple) -> bool:
    for a in args:
        if type(a) not in _TENSOR_TYPES:
            return False
    return len(args) < 2 or len({id(a) for a in args}) == len(args)


def _positional_tensors(args: tuple) -> Call:
    """The common call `f(x, y, ...)` on distinct Tensors: the same key as the general path."""
    treedef = _POSITIONAL_TREEDEFS.get(len(args))
    if treedef is None:
        treedef = _POSITIONAL_TREEDEFS[len(args)] = jax.tree.structure(((0,) * len(args), {}))
    arrays = [_read(a) for a in args]
    tensors = list(args)
    if _placement_matters():
        spec = tuple([tensor_spec(a) for a in arrays])
    else:
        spec = (arrays[0].aval,) if len(arrays) == 1 else tuple([a.aval for a in arrays])
    return Call((treedef, spec), tensors, treedef, tensors, arrays, [])


def _unsupported(args: tuple, kwargs: dict, bad: Any) -> UnsupportedArgumentError:
    path = next((p for p, leaf in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]
                 if leaf is bad), ())
    what = type(bad).__name__
    hint = ("wrap it with eg.tensor(...)" if isinstance(bad, (np.ndarray, jax.Array))
            else "pass its Tensors, or make it a hashable plain value")
    return UnsupportedArgumentError(
        f"argument {format_path(path)} is a {what}; a traced function takes Tensors, Modules, "
        f"Optimizers, plain Python values (bool, int, float, str, None) and tuples, lists and "
        f"dicts of them: {hint}")


def format_path(path: tuple, names: list[str] | None = None) -> str:
    """A key path of `(args, kwargs)` as the user wrote it: `x`, `batch['image']`, `args[2]`."""
    if not path:
        return "(arguments)"
    first, rest = path[0], path[1:]
    out = ""
    if getattr(first, "idx", None) == 0 and rest:
        i = rest[0].idx
        out = names[i] if names and i < len(names) else f"args[{i}]"
        rest = rest[1:]
    elif getattr(first, "idx", None) == 1 and rest:
        out = str(rest[0].key)
        rest = rest[1:]
    return out + "".join(str(k) for k in rest)


# ----- module and optimizer signatures ------------------------------------------------------
def _value_signature(v: Any) -> Any:
    if isinstance(v, STATIC_TYPES):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_value_signature(e) for e in v)
    if isinstance(v, dict):
        return tuple((k, _value_signature(e)) for k, e in v.items())
    return ("object", id(v))


def module_signature(m: M.Module, exclude: Iterable[str] = ()) -> tuple:
    """Every attribute of `m` (Tensors and Modules by identity, plain values by value), except
    `exclude` (attributes a region itself writes) and the derived `structure_version`."""
    skip = set(exclude) | {"structure_version"}
    return tuple((k, _value_signature(v)) for k, v in vars(m).items() if k not in skip)


def describe_module_change(m: M.Module, old: tuple, new: tuple) -> str:
    """Which attribute of `m` differs between two signatures."""
    before, after = dict(old), dict(new)
    for k in before.keys() | after.keys():
        if before.get(k, "<missing>") != after.get(k, "<missing>"):
            if k == "training":
                return f"{type(m).__name__}.training changed from {before.get(k)} to {after.get(k)}"
            return f"attribute `{k}` of a {type(m).__name__} was reassigned"
    return f"a {type(m).__name__} changed"


def optimizer_signature(opt: optim.Optimizer, inputs: frozenset[tuple[int, str]],
                        keys: tuple | None = None) -> tuple:
    """The structure of `opt`'s param groups: per group its size, the exact value of every
    setting the region baked in, and, for settings it reads as inputs (`inputs` holds their
    (group index, key)), only what selects a different computation (the zero-ness of the
    optimizer's `structural_hypers`, e.g. SGD's momentum).

    `keys` (per group, from `optimizer_keys` at capture) limits it to the settings that existed
    then: one added later (a scheduler's `initial_lr`) cannot have been read by the region."""
    structural = getattr(opt, "structural_hypers", ())
    if keys is None:
        keys = optimizer_keys(opt)
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
                items.append((k, _value_signature(v)))
        groups.append((len(g["params"]), tuple(items)))
    return tuple(groups)


def optimizer_keys(opt: optim.Optimizer) -> tuple:
    """The settings of each param group (all keys but "params")."""
    return tuple(tuple(k for k in g if k != "params") for g in opt.param_groups)


def _input_shape(v: Any) -> Any:
    return ("input",) * len(v) if isinstance(v, (tuple, list)) else "input"


def optimizer_state_signature(opt: optim.Optimizer) -> tuple:
    """Which state tensors exist per parameter (their identity)."""
    return tuple(tuple((k, id(t)) for k, t in s.items()) for s in opt.state.values())


# ----- explaining a recompilation --------------------------------------------------------------
def _leaf_text(spec: Any) -> str:
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], jax.core.ShapedArray):
        device = ", ".join(str(d) for d in spec[1].device_set)
        return f"{_leaf_text(spec[0])} on {device}"
    if isinstance(spec, jax.core.ShapedArray):
        return f"Tensor{list(spec.shape)} {np.dtype(spec.dtype).name}" + (
            " (weak type)" if spec.weak_type else "")
    if isinstance(spec, tuple) and spec and spec[0] == "same as tensor":
        return f"the same tensor as tensor argument {spec[1]}"
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], type):
        tp, v = spec
        if issubclass(tp, (_Module, _Optimizer)):
            return f"a different {tp.__name__} object"
        return f"{v!r}"
    return repr(spec)


def describe_change(fn: Callable, old: tuple, new: tuple, args: tuple, kwargs: dict) -> str:
    """Which argument leaf differs between the keys `old` and `new` of calls of `fn`, from what
    to what (`args`/`kwargs` are the new call's, for the names)."""
    old_tree, old_spec = old
    new_tree, new_spec = new
    if old_tree != new_tree:
        return f"the argument structure changed from {old_tree} to {new_tree}"
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = None
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]]
    for path, a, b in zip(paths, old_spec, new_spec):
        if a != b:
            return f"argument {format_path(path, names)} changed from {_leaf_text(a)} to " \
                   f"{_leaf_text(b)}"
    return "the arguments are unchanged"
