"""A captured region's executables on disk (`store.py`), keyed by its jaxpr before anything is
traced again.

jax's persistent cache is keyed by the lowered program: a process that finds a region's
executables there still derives the training forward and backward (`jax.vjp`, the residual
pruning: several traces of the whole region) and lowers them to learn the key, 1-2 s of a
detector's first step on 2 cores. But the captured jaxpr says what the region computes, so
when the persistent cache is on (the default: `cache_location.py`) a segment's executables are kept
in `<cache dir>/segments/` under the jaxpr's text, its constants' bytes, the segment's abstract
inputs, gradient signature and compile options, and `store.environment` of the four
packages (whose code turns a jaxpr into executables).

A jaxpr's text does not show the Python functions some equations carry (a `custom_vjp`'s
backward, a `custom_jvp`'s rule, a host callback): a region is kept only when each one is
defined in jax or in this project (their code is in the key) and whatever it closes over is a
plain value or an array (put in the key). Anything else, a per-rank region, or a process with
more than one device, compiles as it does with the cache off.

A region with graph breaks runs lazily recorded stretches of ops (`partial/lazy/`), each
a segment whose function replays the records: such a stretch is described by its records (each op's
name, static attributes and where its inputs come from), under the same rule for the functions
behind each op and in its attributes.
"""

from __future__ import annotations

import functools as ft
import hashlib
import os
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np
from jax.extend import core as jex

from . import store

HIT_EVENT = "/partial/segment_cache/hits"  # one per executable loaded (`jax.monitoring`)
_SUBDIR = "segments"
_PACKAGES = ("eager", "xla_segments", "autograd_bridge", "partial")
_TRUSTED = ("jax.", "jax", "eager", "xla_segments", "autograd_bridge", "partial")
_PLAIN = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), np.dtype,
          np.generic)

try:  # the settings that shape a trace (x64, matmul precision, ...), as jit's own cache keys them
    from jax._src.config import trace_context as _trace_context
except ImportError:  # another jax: nothing is kept, rather than keyed without them
    _trace_context = None


@ft.cache
def _reader() -> ThreadPoolExecutor:
    """The thread that reads executables a step needs later (`load_later`): one, so that
    reads never take both cores of a small machine from the step that waits for none of them."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="partial-segment-reader")


# A forked child has the pool but not its thread: work it submitted would wait forever.
os.register_at_fork(after_in_child=_reader.cache_clear)


class SegmentStore:
    """`segment.Store` for one captured program: `description` says what it computes."""

    def __init__(self, description: str):
        self.description = description
        self._misses: dict[str, int] = {}  # text -> jax's cache hits at the miss (this thread)
        # in the compiled functions' names: after an upgrade of these packages jax's own cache
        # holds no executable of theirs, which this store could not keep (`save`)
        environment = store.environment(_PACKAGES).encode()
        self.tag = "_" + hashlib.sha256(environment).hexdigest()[:8]

    def _where(self, text: str) -> tuple[Any, str] | None:
        folder = store.folder(_SUBDIR)
        if folder is None or not store.one_device() or _trace_context is None:
            return None
        full = repr((store.scope(_PACKAGES, settings_key()), self.description,
                     text))
        return store.path_of(folder, full), full

    def load(self, text: str) -> tuple[Any, dict] | None:
        where = self._where(text)
        found = None if where is None else store.read(*where)
        if found is None:
            self._misses[text] = store.jax_hits.count
        else:
            jax.monitoring.record_event(HIT_EVENT)
        return found

    def load_later(self, text: str) -> Callable[[], tuple[Any, dict] | None] | None:
        """`load(text)` on the reader thread: None when nothing is kept for `text`, else a
        function that waits for the read and returns what `load` would."""
        where = self._where(text)  # (here: the trace context is this thread's)
        # noted as a miss either way: a read that fails is compiled and saved again
        self._misses[text] = store.jax_hits.count
        if where is None or not where[0].exists():
            return None
        reading = _reader().submit(store.read, *where)

        def wait() -> tuple[Any, dict] | None:
            found = reading.result()
            if found is not None:
                jax.monitoring.record_event(HIT_EVENT)
            return found

        return wait

    def save(self, text: str, compiled: Any, xla_options: dict) -> None:
        # only an executable this thread compiled itself serializes whole (`store.jax_hits`)
        if self._misses.pop(text, None) != store.jax_hits.count:
            return
        where = self._where(text)
        if where is not None:
            store.write(*where, compiled, xla_options)


def settings_key() -> tuple:
    """jax's settings that shape a trace in this thread (x64, matmul precision, ...), as an
    entry is keyed by them: values, and the type of anything else (outside a trace its one
    unprintable part, the axis environment, is empty). Call only where `_trace_context` exists."""
    assert _trace_context is not None
    return tuple(v if _plain(v) else type(v).__name__ for v in _trace_context())


def describe(jaxpr: Any, consts: list, n_args: int) -> str | None:
    """What a program (`Program.function()`: `jaxpr` over the consts, then the arguments)
    computes, as text; None when some of it the text cannot say (see the module docstring)."""
    extra: list = []
    if not _walk_jaxpr(jaxpr, extra):
        return None
    baked = [("input", p) if p is not None else _array_text(v) for p, v in consts]
    return repr((str(jaxpr), extra, baked, n_args))


def _walk_jaxpr(jaxpr: Any, extra: list) -> bool:
    for eqn in jaxpr.eqns:
        for value in eqn.params.values():
            if not _walk_param(value, extra):
                return False
    return True


def _walk_param(value: Any, extra: list) -> bool:
    """Add to `extra` what the printed jaxpr leaves out of `value`; False if unknowable."""
    if isinstance(value, jex.ClosedJaxpr):
        extra.extend(_array_text(c) for c in value.consts)
        return _walk_jaxpr(value.jaxpr, extra)
    if isinstance(value, jex.Jaxpr):
        return _walk_jaxpr(value, extra)
    if isinstance(value, (tuple, list)):
        return all(_walk_param(v, extra) for v in value)
    if isinstance(value, (np.ndarray, jax.Array)):
        extra.append(_array_text(value))
        return True
    return _walk_value(value, extra, {}, depth=0)


_HOLDERS = ("f", "fun", "func", "fwd", "bwd", "jvp", "callback", "callback_func",
            "__wrapped__", "__func__")


def _walk_value(value: Any, extra: list, seen: dict, depth: int) -> bool:
    """Whether what `value` computes is said by `extra` (which gets the values and the names
    of the functions it holds) or by jax's version: False when some function in it is
    neither jax's nor this project's, or it holds something unknown. `seen` holds what this
    walk entered already (functions and the objects defining them refer to each other)."""
    if depth > 24:
        return False
    if id(value) in seen:  # alive: `seen` holds it until the walk ends
        return True
    seen[id(value)] = value
    if isinstance(value, (np.ndarray, jax.Array)):
        extra.append(_array_text(value))
        return True
    if _plain(value):
        extra.append(repr(value))
        return True
    inner = [getattr(value, name) for name in _HOLDERS if hasattr(value, name)]
    if isinstance(value, ft.partial):
        inner += [*value.args, *value.keywords.values()]
    if isinstance(value, types.FunctionType):
        if not (value.__module__ or "").startswith(_TRUSTED):
            return False
        extra.append(f"{value.__module__}.{value.__qualname__}")
        inner += [cell.cell_contents for cell in value.__closure__ or () if _has_contents(cell)]
        inner += list(value.__defaults__ or ())
    elif isinstance(value, (tuple, list, frozenset)):
        inner += list(value)
    elif isinstance(value, dict):  # e.g. the memo of jax's `_memoize`
        inner += [*value.keys(), *value.values()]
    elif not inner and not _inert(value):
        return False
    return all(_walk_value(v, extra, seen, depth + 1) for v in inner)


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _inert(value: Any) -> bool:
    """What a trusted function may hold that holds no function of its own: types, modules,
    builtins, sentinels, jax's own objects (tree definitions, meshes, primitives, jaxprs: a jaxpr a
    function closes over is derived from the region's, whose text is the key)."""
    return type(value) is object or \
        isinstance(value, (type, types.ModuleType, types.BuiltinFunctionType)) or \
        type(value).__module__.startswith(("jax.", "jaxlib."))


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list, frozenset)):
        return all(_plain(v) for v in value)
    if isinstance(value, slice):
        return _plain((value.start, value.stop, value.step))
    return isinstance(value, _PLAIN)


def _array_text(value: Any) -> str:
    array = np.asarray(value)
    return f"{array.dtype}{array.shape}:{hashlib.sha256(array.tobytes()).hexdigest()}"


def for_program(program: Any) -> SegmentStore | None:
    """The store of a captured program's segment (its `jaxpr`, `consts`, `n_args` and
    `per_rank`, as `partial`'s `Program` has them), or None: the cache is off, the program is
    per rank, or its jaxpr does not say all it computes."""
    if store.folder(_SUBDIR) is None or program.per_rank is not None or not store.one_device():
        return None
    description = describe(program.jaxpr, program.consts, program.n_args)
    return None if description is None else SegmentStore(description)


def for_stretch(records: list, layout: tuple) -> SegmentStore | None:
    """The store of the segment replaying a lazily recorded stretch, or None: the cache is
    off, or an op's function or attributes hold something its name and values cannot say.
    `records` are the stretch's (op, attributes, input descriptors, recorded); `layout` is
    every other value the replay depends on (outputs, gradient cuts, options), plain."""
    if store.folder(_SUBDIR) is None or not store.one_device() or not _plain(layout):
        return None
    extra: list = []
    ops: dict[str, Any] = {}
    for op, attrs, *_ in records:
        known = ops.get(op.name)
        if known is None:
            ops[op.name] = op
            if not _walk_value(op.fwd, extra, {}, 0):
                return None
        elif known is not op:  # two ops of one name: the name does not say which
            return None
        if not _walk_value(attrs, extra, {}, 0):
            return None
    text = [(op.name, attrs, descs, recorded, op.differentiable, op.multi_output)
            for op, attrs, descs, recorded in records]
    return SegmentStore(repr((text, layout, extra)))
