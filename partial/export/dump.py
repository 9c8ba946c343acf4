"""Export: a region's inference forward as serialized StableHLO (`jax.export`), to run without
the Python that defined it (`fn.dump`, `fn.export`; `partial.load` in `format.py`).

What is exported is a captured program that neither writes state back nor computes gradients:
its inputs are the region's Tensor arguments; the parameters and buffers it reads are baked in
as constants or, with `keep_params=True`, passed as extra inputs stored beside the program.

Note [dynamic batch]. `dynamic_batch=True` makes axis 0 of every input one symbolic dimension.
The region is captured anew on inputs of symbolic shape (jax's shape polymorphism: exact). Eager
code that needs a concrete size (a reshape that works out a `-1`, say) cannot run on a symbolic
one; the region is then captured at batch 1 and `jax.vmap`ped over the batch. That is right only
when the examples of a batch do not interact (true of inference in eval mode), so the result is
compared with the cached entry at its own batch size, on random inputs, and refused if they
differ.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg

from ..capture import BreakFound, Program, capture
from ..errors import ExportError
from ..region import Argument, Call, Lifted, Result, argument_paths, flatten_call
from .format import Artifact, write

logger = logging.getLogger("partial")
_wrap = eg.hooks.wrap
_CALL_FIRST = "call it once with example inputs first (dump exports the last call's entry)"


# ----- the entry points ----------------------------------------------------------------------
def dump_region(traced: Any, path: Any, *, dynamic_batch: bool, keep_params: bool,
                arg_names: Any = None) -> None:
    """`TracedFunction.dump`: write the most recently used entry of `traced` to `path`."""
    fn, settings, cache, name = traced._fn, traced._settings, traced._cache, traced._name()
    what = f"{settings.kind} `{name}`"
    if getattr(cache.runner, "first_break", None) is not None:
        raise ExportError(
            f"{what} has graph breaks ({cache.runner.first_break}), so it is not one program and "
            "cannot be exported. Export the static part on its own: move the eager code out of "
            "the region (or the region out of the eager code) and dump that partial_trace.")
    entry = cache.recent or cache.most_recent()
    if entry is None:
        raise ExportError(f"{what} has no compiled entry to dump: {_CALL_FIRST}.")
    program = entry.program
    _refuse(program, what)
    specs = [_spec(a.shape, a) for a in program.in_avals[:program.n_args]]
    mode = "fixed"
    if dynamic_batch:
        args, kwargs, tensors, objects = arguments_of(entry.key, what)
        call = Call(entry.key, [], entry.key[0], tensors, [], objects)
        with _autocast_of(entry.key):  # captured again as the entry was: same dtypes
            program, specs, mode = _dynamic(fn, settings, (args, kwargs), call, program, what)
        _refuse(program, what)
    names = input_names(fn, entry.key)
    if arg_names is not None:
        names = _renamed(names, arg_names, what)
    write(path, _artifact(program, specs, keep_params, names, name, mode))


def export_region(traced: Any, args: tuple, kwargs: dict) -> jax.export.Exported:
    """`TracedFunction.export`: the inference forward for arguments like `args`, `kwargs`,
    captured anew (the cache is not touched), parameters baked in."""
    what = f"{traced._settings.kind} `{traced._name()}`"
    specs_of: dict[int, Any] = {}

    def as_tensor(a: Any) -> Any:
        if isinstance(a, jax.ShapeDtypeStruct):  # a spec, perhaps of symbolic shape
            shape = [d if isinstance(d, int) else 1 for d in a.shape]
            t = _wrap(jnp.zeros(shape, a.dtype))
            specs_of[id(t)] = _spec(a.shape, a)
            return t
        return _wrap(jnp.asarray(a)) if isinstance(a, (np.ndarray, jax.Array)) else a

    args, kwargs = jax.tree.map(as_tensor, (args, kwargs))
    call = flatten_call(args, kwargs)
    args, kwargs = call.arguments(args, kwargs)
    specs = [specs_of[id(t)] if id(t) in specs_of else _spec(a.shape, a)
             for t, a in zip(call.tensors, call.arrays)]
    program = _capture(traced._fn, traced._settings, (args, kwargs), _with_arrays(call, specs),
                       what)
    _refuse(program, what)
    return _export(program, specs, keep_params=False, per_example=False, what=what)[0]


# ----- capture ---------------------------------------------------------------------------------
def arguments_of(key: tuple, what: str) -> tuple[tuple, dict, list, list]:
    """(args, kwargs, tensors, objects) like those of the call that made guard key `key`: a
    zero Tensor per Tensor argument (capture replaces its value with a tracer), the Module and
    Optimizer arguments themselves, plain values as they were."""
    treedef, spec = key[0], key[1]
    leaves: list = []
    tensors: list = []
    objects: list = []
    for s in spec:
        aval = s[0] if isinstance(s, tuple) and len(s) == 2 and _is_aval(s[0]) else s
        if _is_aval(aval):
            tensors.append(_wrap(jnp.zeros(aval.shape, aval.dtype)))
            leaves.append(tensors[-1])
        elif isinstance(s, tuple) and s[0] == "same as tensor":
            leaves.append(tensors[s[1]])
        elif isinstance(s, tuple) and len(s) == 2 and hasattr(s[1], "ref"):  # (type, Same)
            obj = s[1].ref()
            if obj is None:
                raise ExportError(f"{what}: a {s[0].__name__} its last call was given no longer "
                                  f"exists; {_CALL_FIRST}.")
            objects.append(obj)
            leaves.append(obj)
        else:
            leaves.append(_plain(s))
    args, kwargs = treedef.unflatten(leaves)
    return args, kwargs, tensors, objects


def _autocast_of(key: tuple) -> Any:
    """The autocast (`eager.amp`) the call that made guard key `key` ran under, if any (the
    key ends with `("autocast", dtype)` then)."""
    low = dict(key[2:]).get("autocast")
    return contextlib.nullcontext() if low is None else eg.amp.autocast(low_prec_dtype=low)


def _is_aval(x: Any) -> bool:
    return isinstance(x, jax.core.ShapedArray)


def _plain(token: tuple) -> Any:
    """The plain value of a `guards.value_token` (the type and the value, "nan" for NaN)."""
    tp, v = token[0], token[1]
    if len(token) == 3:  # a complex with a NaN part, kept as its repr
        return tp(complex(token[2].strip("()")))
    return tp(float("nan") if v == "nan" else v)


def _capture(fn: Callable, settings: Any, arguments: tuple, call: Call, what: str) -> Program:
    """Capture `fn` for inference (no gradients) on `call`; graph breaks are refused."""
    args, kwargs = arguments
    try:
        return capture(fn, args, kwargs, call, kind=settings.kind, differentiable=False,
                       capture_as_const=settings.capture_as_const)
    except BreakFound as found:
        raise ExportError(
            f"{what} breaks ({found.what}), so it is not one program and cannot be exported. "
            "Export the static part on its own, as a partial_trace without the eager code."
        ) from None


def _dynamic(fn: Callable, settings: Any, arguments: tuple, call: Call, fixed: Program,
             what: str) -> tuple[Program, list, str]:
    """The program and input specs with a symbolic batch, and how it was made: "symbolic" or
    "per_example" (see Note [dynamic batch])."""
    avals = fixed.in_avals[:fixed.n_args]
    sizes = {a.shape[0] if a.shape else None for a in avals}
    if None in sizes or len(sizes) != 1:
        raise ExportError(
            f"{what}: dynamic_batch=True needs every input to have the same size on axis 0, the "
            f"batch axis; the inputs have shapes {[tuple(a.shape) for a in avals]}. Dump with a "
            "fixed batch, or pass the inputs without a batch axis as Module state.")
    batch, = jax.export.symbolic_shape("batch")
    specs = [_spec((batch, *a.shape[1:]), a) for a in avals]
    try:
        program = _capture(fn, settings, arguments, _with_arrays(call, specs), what)
        return program, specs, "symbolic"
    except ExportError:
        raise
    except Exception as e:  # noqa: BLE001  (eager code needed a concrete batch: see the Note)
        logger.info("%s: captured at batch 1 and vmapped over the batch for dynamic_batch "
                    "(on a symbolic batch: %s)", what, str(e).splitlines()[0])
    ones = [_spec((1, *a.shape[1:]), a) for a in avals]
    program = _capture(fn, settings, arguments, _with_arrays(call, ones), what)
    _refuse(program, what)
    _check_per_example(program, fixed, specs, what)
    return program, specs, "per_example"


def _with_arrays(call: Call, arrays: list) -> Call:
    return Call(call.key, call.leaves, call.treedef, call.tensors, arrays, call.objects,
                call.floats)


def _spec(shape: tuple, like: Any) -> jax.ShapeDtypeStruct:
    """An input spec of `shape` with the dtype and weak type of `like`, placed nowhere: the
    exported program runs where its caller's arrays are."""
    return jax.ShapeDtypeStruct(shape, like.dtype, weak_type=getattr(like, "weak_type", False))


# ----- what can be exported --------------------------------------------------------------------
def _refuse(program: Program, what: str) -> None:
    """Raise `ExportError` unless `program` is an inference forward over its arguments."""
    fix = ("Export the inference forward: call `.eval()` on the model (BatchNorm then uses its "
           "running statistics, dropout is off), call the function once more, then dump it; "
           "for an xla_trace training step, dump a partial_trace of the model's forward.")
    writes = _live_writes(program)
    if writes:
        written = _state_names(program, [w.target.ref() for w in writes
                                         if hasattr(getattr(w, "target", None), "ref")])
        raise ExportError(f"{what} writes state back after each call ({len(writes)} "
                          f"updates{': ' + written if written else ''}), which an exported "
                          f"inference program cannot do. {fix}")
    if any(not isinstance(s, Lifted) for s in program.sources):
        raise ExportError(f"{what} reads `.grad` slots or optimizer settings: it is a training "
                          f"step, not an inference forward. {fix}")
    if program.per_rank is not None:
        raise ExportError(f"{what} calls per-rank collectives, which need the process group; "
                          "export a region without them.")
    if any(isinstance(leaf, Result) and leaf.length is not None for leaf in program.out_leaves):
        raise ExportError(f"{what} returns a tensor whose size depends on the data (a boolean "
                          "selection: x[mask], F.nonzero, F.cond_take); an exported program has "
                          "outputs of fixed shapes. Return the mask (or x * mask) and select "
                          "after the call.")
    if any(not isinstance(leaf, (Result, Argument)) for leaf in program.out_leaves):
        raise ExportError(f"{what} returns something other than tensors it computes from its "
                          "inputs (a plain value, or a tensor that existed before the call, such "
                          "as a parameter); an exported program returns arrays only.")


def _live_writes(program: Program) -> list:
    """The program's writes whose destination still exists. (A tensor the region made and
    something held on to while it ran, such as a tracer-shaped intermediate, is a write to an
    object that is gone by now: nothing a call would do.)"""
    live = []
    for w in program.writes:
        target = getattr(w, "target", None)
        ref = getattr(target, "ref", None) or getattr(w, "owner", None) or getattr(w, "module",
                                                                                    None)
        if ref is None or ref() is not None:
            live.append(w)
    return live


def _state_names(program: Program, tensors: list) -> str:
    """The module attribute names of `tensors` (e.g. `bn.running_mean`), where known."""
    named = names_of_state(program)
    return ", ".join(named.get(id(t), "a tensor") for t in tensors if t is not None)


def names_of_state(program: Program) -> dict[int, str]:
    """id(tensor) -> its dotted name in the first module that holds it (modules the region
    called come first, outermost first)."""
    names: dict[int, str] = {}
    for ref, _ in program.modules:
        m = ref()
        if m is not None:
            for name, t in [*m.named_parameters(), *m.named_buffers()]:
                names.setdefault(id(t), name)
    return names


def _check_per_example(program: Program, fixed: Program, specs: list, what: str) -> None:
    """Refuse a batch-1 program whose vmap over the batch differs from the entry's own program
    at the entry's batch size (its examples interact, or an output has no batch axis)."""
    size = fixed.in_avals[0].shape[0]
    at_size = [jax.ShapeDtypeStruct((size, *s.shape[1:]), s.dtype) for s in specs]
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s.shape).astype(s.dtype)
              if jnp.issubdtype(s.dtype, jnp.inexact) else np.zeros(s.shape, s.dtype)
              for s in at_size]
    want = jax.jit(_function(fixed, _param_arrays(fixed, what)))(*inputs)
    try:
        got = jax.jit(_per_example(program, _param_arrays(program, what)))(*inputs)
        # jax annotates `structure` with its `PyTreeDef` alias, whose target (in jaxlib's
        # compiled `_jax`, which has no stubs) mypy cannot find
        same = jax.tree.structure(got) == jax.tree.structure(want) and all(  # type: ignore[operator]
            a.shape == b.shape and np.allclose(a, b, rtol=1e-3, atol=1e-4 * (1 + np.abs(b).max()))
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
    except (TypeError, ValueError):  # an output without a batch axis cannot be vmapped out
        same = False
    if not same:
        raise ExportError(
            f"{what}: dynamic_batch=True could not make the batch symbolic (eager code needs a "
            "concrete batch size), and running it example by example does not give the same "
            "outputs: its examples interact (a statistic over the batch), or an output has no "
            "batch axis. Dump it with dynamic_batch=False (one file per batch size).")


# ----- the exported program --------------------------------------------------------------------
def _function(program: Program, params: list | None) -> Callable:
    """The program as a function of its arguments (then of its parameters when `params` is
    None) returning the region's output structure."""
    run, n = program.function(), program.n_args
    leaves, tree = program.out_leaves, program.out_treedef

    def region(*arrays: Any) -> Any:
        inputs = arrays[:n]
        outs = run(*inputs, *(arrays[n:] if params is None else params))
        return tree.unflatten([outs[leaf.index] if isinstance(leaf, Result)
                               else inputs[leaf.index] for leaf in leaves])

    return region


def _per_example(program: Program, params: list | None) -> Callable:
    """A batch-1 program mapped over axis 0 of its arguments (parameters unmapped)."""
    one, n = _function(program, params), program.n_args

    def batched(*arrays: Any) -> Any:
        def example(*xs: Any) -> Any:
            out = one(*[x[None] for x in xs], *arrays[n:])
            return jax.tree.map(lambda o: o[0], out)

        return jax.vmap(example)(*arrays[:n])

    return batched


def _param_arrays(program: Program, what: str) -> list:
    tensors = [s.ref() for s in program.sources]
    if any(t is None for t in tensors):
        raise ExportError(f"{what}: a tensor the region reads no longer exists; {_CALL_FIRST}.")
    return [eg.read(t) for t in tensors]


def _export(program: Program, specs: list, *, keep_params: bool, per_example: bool,
            what: str = "region") -> tuple[jax.export.Exported, list]:
    """The `Exported` of `program` on inputs `specs`, and the parameter arrays it takes after
    them (none unless `keep_params`)."""
    params = _param_arrays(program, what)
    make = _per_example if per_example else _function
    fn = make(program, None if keep_params else params)
    extra = [jax.ShapeDtypeStruct(p.shape, p.dtype) for p in params] if keep_params else []
    try:
        exported = jax.export.export(jax.jit(fn))(*specs, *extra)
    except ExportError:
        raise
    except Exception as e:
        raise ExportError(f"{what}: jax.export could not export the captured program: {e}") from e
    return exported, params if keep_params else []


def _artifact(program: Program, specs: list, keep_params: bool, names: list, name: str,
              mode: str) -> Artifact:
    exported, params = _export(program, specs, keep_params=keep_params,
                               per_example=mode == "per_example", what=f"`{name}`")
    state = names_of_state(program)
    tensors = [s.ref() for s in program.sources] if keep_params else []
    param_names = [state.get(id(t), f"param{i}") for i, t in enumerate(tensors)]
    return Artifact(exported, names, [np.asarray(p) for p in params], param_names, name, mode)


def _renamed(names: list[str], arg_names: Any, what: str) -> list[str]:
    """MegEngine's `arg_names`: one new name per Tensor argument, all different."""
    given = [arg_names] if isinstance(arg_names, str) else [str(n) for n in arg_names]
    if len(given) != len(names) or len(set(given)) != len(given):
        raise ExportError(f"{what}: arg_names={given} must give {len(names)} different names, "
                          f"one per Tensor argument ({names}).")
    return given


def input_names(fn: Callable, key: tuple) -> list[str]:
    """The name of each Tensor argument of guard key `key` as the user wrote it: `x`,
    `batch['image']`, `args[2]`."""
    return [path for path, s in argument_paths(fn, key)
            if _is_aval(s) or isinstance(s, tuple) and len(s) == 2 and _is_aval(s[0])]
