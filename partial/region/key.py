"""The guard key of a call: what its arguments look like, as a hashable value.

`flatten_call` turns the arguments of a call into a key (tree structure; per Tensor its abstract
value: shape, dtype, weak type and, with several devices, placement; which arguments are the same
tensor; Module and Optimizer arguments by weak identity; every plain Python value by value, NaN
included; Python floats by type only, as they are traced inputs) and the lists the entry needs
(Tensors and their arrays, objects). `describe_change` says, for the recompilation warning, which
argument or leaf changed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import eager as eg
import eager.module as M
import eager.optimizer as optim

from ..errors import UnsupportedArgumentError
from .guards import Same, value_token

# Plain values: keyed by value (a Python float argument is traced instead; one stored in a
# container an op reads, e.g. a module attribute, is compared by value).
STATIC_TYPES = (bool, int, float, complex, str, bytes, type(None))
_Tensor, _Module, _Optimizer = eg.Tensor, M.Module, optim.Optimizer
# objects passed through by identity: what the function does with them is captured (a
# GradManager argument, as MegEngine code passes one to a traced step, is guarded as one in a
# closure is)
_OBJECTS = (_Module, _Optimizer, eg.autodiff.GradManager, eg.autodiff.GradManagerGroup)
_read, _wrap = eg.hooks.peek, eg.hooks.wrap
_autocast_dtype = eg.amp.autocast_dtype


class Call:
    """The flattened arguments of one call."""

    __slots__ = ("key", "leaves", "treedef", "tensors", "arrays", "objects", "floats")

    def __init__(self, key: tuple, leaves: list, treedef: Any, tensors: list, arrays: list,
                 objects: list, floats: int = 0):
        self.key, self.leaves, self.treedef = key, leaves, treedef
        self.tensors, self.arrays, self.objects = tensors, arrays, objects
        self.floats = floats  # Python float arguments, passed to the region as 0-d Tensors

    def arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The arguments the region runs on: `(args, kwargs)` with every Python float replaced
        by the 0-d Tensor that carries it as an input."""
        return self.treedef.unflatten(self.leaves) if self.floats else (args, kwargs)


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


def function_token(fn: Any) -> tuple:
    """What tells apart functions that share code: the values of their closure variables and
    defaults, and the object of a bound method or a callable object (by weak identity, plain
    values by value). Taken once per wrapper: rebinding a closure variable later is not seen,
    as rebinding a global is not (`cache_clear()` is for that)."""
    target = getattr(fn, "__func__", fn)
    if getattr(target, "__code__", None) is None:  # a Module or callable object
        return (("self", Same(fn)),)
    token: list = []
    if hasattr(fn, "__self__"):
        token.append(("self", Same(fn.__self__)))
    cells = target.__closure__ or ()
    for name, cell in zip(target.__code__.co_freevars, cells):
        try:
            token.append((name, _closure_token(cell.cell_contents)))
        except ValueError:  # an empty cell: a variable not assigned yet
            token.append((name, "<unassigned>"))
    if target.__defaults__:
        token.append(("defaults", _closure_token(target.__defaults__)))
    if target.__kwdefaults__:
        token.append(("kwdefaults", _closure_token(tuple(target.__kwdefaults__.items()))))
    return tuple(token)


def _closure_token(v: Any) -> Any:
    """Immutable plain values by value; anything else, mutable containers included (a list the
    function appends to), by identity: that is what the closure holds."""
    if isinstance(v, tuple):
        return (tuple, tuple(_closure_token(e) for e in v))
    if isinstance(v, (list, dict, set)):
        return Same(v)
    return value_token(v)


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
    floats = 0
    for i, x in enumerate(leaves):
        if type(x) is float:  # traced, so a new value does not compile anew
            a = jax.device_put(x)  # jnp.asarray would compile a staging program per process
            leaves[i] = t = _wrap(a)
            tensors.append(t)
            arrays.append(a)
            spec.append(tensor_spec(a))
            floats += 1
        elif isinstance(x, _Tensor):
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
        elif isinstance(x, _OBJECTS):
            objects.append(x)
            spec.append((type(x), Same(x)))
        elif isinstance(x, (*STATIC_TYPES, np.generic)):
            spec.append(value_token(x))
        else:
            raise _unsupported(args, kwargs, x)
    return Call((treedef, tuple(spec), *_amp_key(), *_quantized_key(tensors)), leaves, treedef,
                tensors, arrays, objects, floats)


def _amp_key() -> tuple:
    """The autocast state of this thread (`eager.amp`), part of every key: it changes the
    dtypes the region computes in. Empty outside autocast."""
    low = _autocast_dtype()
    return () if low is None else (("autocast", low),)


def _quantized_key(tensors: list) -> tuple:
    """The quantized dtypes of quantized Tensor arguments (MegEngine's qint8(scale), ...), by
    position: their arrays are integers, and the scales are baked into the program as
    constants, so a new scale is a new entry. Empty when none is quantized (the common case:
    `_qdtype` is a class default of None)."""
    found = tuple((i, _dtype_token(t._qdtype)) for i, t in enumerate(tensors)
                  if t._qdtype is not None)
    return (("quantized", found),) if found else ()


def _dtype_token(dtype: np.dtype) -> tuple:
    info = dtype.metadata["mgb_dtype"]  # type: ignore[index]
    return (dtype.str, info["name"], info["scale"], info.get("zero_point", 0))


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
    return Call((treedef, spec, *_amp_key(), *_quantized_key(tensors)), tensors, treedef,
                tensors, arrays, [])


def _unsupported(args: tuple, kwargs: dict, bad: Any) -> UnsupportedArgumentError:
    path = next((p for p, leaf in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]
                 if leaf is bad), ())
    what = type(bad).__name__
    hint = ("wrap it with eg.tensor(...)" if isinstance(bad, (np.ndarray, jax.Array))
            else "pass its Tensors, or make it a hashable plain value")
    return UnsupportedArgumentError(
        f"argument {format_path(path)} is a {what}; a traced function takes Tensors, Modules, "
        f"Optimizers, GradManagers, plain Python values (bool, int, float, str, None) and "
        f"tuples, lists and "
        f"dicts of them: {hint}")


def parameter_names(fn: Callable) -> list[str] | None:
    """The names of `fn`'s positional parameters (of its `forward` for a Module), which name
    positional arguments in messages; None when Python cannot tell."""
    target = fn.forward if isinstance(fn, M.Module) else fn
    try:
        return [n for n, p in inspect.signature(target).parameters.items()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None


def argument_paths(fn: Callable, key: tuple) -> list[tuple[str, Any]]:
    """(path as the user wrote it, spec) of each argument leaf of guard key `key` of `fn`."""
    treedef, spec = key[0], key[1]
    skeleton = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(skeleton)[0]]
    names = parameter_names(fn)
    return [(format_path(p, names), s) for p, s in zip(paths, spec)]


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


# ----- explaining a recompilation --------------------------------------------------------------
def _placed_spec(spec: Any) -> bool:
    """Whether `spec` is a tensor's (abstract value, placement), as keyed with several devices."""
    return isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0],
                                                                     jax.core.ShapedArray)


def leaf_text(spec: Any) -> str:
    if _placed_spec(spec):
        device = ", ".join(str(d) for d in spec[1].device_set)
        return f"{leaf_text(spec[0])} on {device}"
    if isinstance(spec, jax.core.ShapedArray):
        return f"Tensor{list(spec.shape)} {np.dtype(spec.dtype).name}" + (
            " (weak type)" if spec.weak_type else "")
    if isinstance(spec, tuple) and spec and spec[0] == "same as tensor":
        return f"the same tensor as tensor argument {spec[1]}"
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], type):
        tp, v = spec
        if issubclass(tp, _OBJECTS):
            return f"a different {tp.__name__} object"
        return "nan" if v == "nan" else f"{v!r}"
    return repr(spec)


def _amp_text(amp: list) -> str:
    return f"{amp[0][1]}" if amp else "off"


def describe_change(fn: Callable, old: tuple, new: tuple, args: tuple, kwargs: dict) -> str:
    """Which argument leaf differs between the keys `old` and `new` of calls of `fn`, from what
    to what (`args`/`kwargs` are the new call's, for the names)."""
    old_tree, old_spec, *old_amp = old
    new_tree, new_spec, *new_amp = new
    if old_amp != new_amp:
        return f"autocast changed from {_amp_text(old_amp)} to {_amp_text(new_amp)}"
    if old_tree != new_tree:
        return f"the argument structure changed from {old_tree} to {new_tree}"
    names = parameter_names(fn)
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]]
    for path, a, b in zip(paths, old_spec, new_spec):
        if a != b:
            if _placed_spec(a) and _placed_spec(b) and a[1] == b[1]:
                a, b = a[0], b[0]  # the same placement: name only what changed
            return f"argument {format_path(path, names)} changed from {leaf_text(a)} to " \
                   f"{leaf_text(b)}"
    return "the arguments are unchanged"

