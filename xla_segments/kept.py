"""Eager ops' executables kept on disk under a key made before tracing (`store.py`).

jax's persistent compilation cache is keyed by the lowered program, so a process that finds every
executable there still traces and lowers each one to learn its key: on 2 cores 10-40 ms per eager
op (an MLIR context alone is 5 ms), 0.3-0.5 s before a detection head's first step ends, however
warm the cache. A built-in op's program is fixed by what this key holds: the op's name (and the
variant: forward, the vjp of some inputs, a ragged kind), its static attributes, the abstract
values of its arguments, its XLA options, the source of the `eager` package that defines it, and
the versions and settings of jax, jaxlib and the machine. So when the persistent cache is on
(the default: `cache_location.py`), a built-in op's first call
with new abstract values loads its executable from `<cache dir>/eager-ops/` by that key, and
compiles and stores it only when it is not there. Each load is reported through
`jax.monitoring`, as jax reports its own cache's: the event `HIT_EVENT`, and the duration
`LOAD_EVENT` with `fun_name` the program (`"jit(add)"`, `"jit(add.vjp)"`), so that compile
counters can count a load as jax counts one of its own cache.

Only what the key describes exactly is kept: ops that `eager` itself registers (an op a user
defines may close over anything), attributes of plain values (numbers, strings, dtypes, tuples
of them), arguments that are concrete arrays, numpy values or Python scalars, and processes with
one device that run alone (not a rank of `jax.distributed`). Everything else runs through the
op's plain `jax.jit`, as it does with the cache off.
An entry that cannot be read is removed, and the program compiled anew (or loaded from jax's
cache). The directory is private to its user (`cache_location.py`).

What eager learns by tracing its own code under such a key, as a literal (how an op runs on
ragged storage), is kept beside them in `<cache dir>/eager-values/` (`kept_value`).
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

try:  # the settings that shape a trace (x64, matmul precision, ...), as jit's own cache keys them
    from jax._src.config import trace_context as _trace_context
except ImportError:  # another jax: nothing is kept, rather than keyed without them
    _trace_context = None

from . import compile_pool, store
from .options import base_compile_options

HIT_EVENT = "/eager/persistent_cache/hits"
LOAD_EVENT = "/eager/persistent_cache/load_duration"
_SUBDIR = "eager-ops"
_VALUES = "eager-values"
_PLAIN = (bool, int, float, complex, str, type(None), type(Ellipsis), np.dtype, enum.Enum)
_SCALARS = (bool, int, float, complex)
_ARRAY: list[type] = []  # jax's concrete array type, found at the first wrap (the backend is up)


class _Owner:
    """Who keeps programs here (`eager`, which `own` names at its import): the packages whose
    source the key holds (an op's function may call anything in them), and whether a capture
    is current (a call made inside one traces through the plain jit)."""

    packages: tuple[str, ...] = ("eager",)

    @staticmethod
    def capturing() -> bool:
        return False


def own(packages: tuple[str, ...], capturing: Callable[[], bool]) -> None:
    """Name the packages whose ops are kept here and how to tell a capture is current."""
    _Owner.packages, _Owner.capturing = packages, staticmethod(capturing)  # type: ignore[method-assign]


def cache_dir() -> str | None:
    """Where the eager ops' executables live now: a folder of the persistent cache, or None."""
    return store.folder(_SUBDIR)


def wrap(fn: Callable, ident: tuple, key: tuple, options: dict | None,
         donate: tuple[int, ...]) -> Persistent | None:
    """The op function `fn` with static attributes `key` as an eager call runs it: through the
    disk cache, with its plain `jax.jit` for calls in a trace. None when the cache is off or
    cannot key this program: the caller keeps its plain jit."""
    if _trace_context is None or cache_dir() is None or not store.one_device():
        return None
    if not _plain_value(key) or not _plain_value(options):
        return None
    if not _ARRAY:
        # evaluated now even when the first wrap happens in a trace (jax 0.11 stages a
        # constant made there: its type would be the tracer's, and tracers would be keyed)
        with jax.ensure_compile_time_eval():
            concrete = jax.device_put(0.0)
        if isinstance(concrete, jax.core.Tracer):
            return None
        _ARRAY.append(type(concrete))

    def own(*args: Any) -> Any:
        return fn(*args)

    name = ident[0] + (".vjp" if "vjp" in ident else "")
    # A function of its own, so that no other jit shares its traces, lowerings and hence
    # executables: each one it compiles is new, or came from jax's cache (see `_JaxHits`).
    # Its name carries the environment's hash, so that jax's cache (keyed by the program,
    # names included) holds no copy of it from before an upgrade of `eager` that would keep
    # this cache from ever storing it.
    own.__name__ = f"{name}_{hashlib.sha256(_environment().encode()).hexdigest()[:8]}"
    jitted = Jit(own, donate_argnums=donate, compiler_options=options)
    program = repr((ident, donate, key, sorted((options or {}).items())))
    return Persistent(jitted, Jit(fn, donate_argnums=donate), program, f"jit({name})")


class Jit:
    """`jax.jit(fn, **settings)`, made at its first use: making a jit reads the function's
    signature (0.1 ms), and a warm process loads most of its programs from disk without ever
    tracing them (RetinaNet's eager first step made 206 jits)."""

    __slots__ = ("fn", "settings", "made")

    def __init__(self, fn: Callable, **settings: Any):
        self.fn, self.settings = fn, settings
        self.made: Any = None

    def get(self) -> Any:
        if self.made is None:
            self.made = jax.jit(self.fn, **self.settings)
        return self.made

    def __call__(self, *args: Any) -> Any:
        return self.get()(*args)

    def _cache_size(self) -> int:  # as a jitted function reports it (compiled specializations)
        return 0 if self.made is None else self.made._cache_size()


def kept_value(what: str, key: tuple, make: Callable[[], Any]) -> Any:
    """`make()`, a literal (numbers, strings, None, tuples of them) that eager derives by
    tracing its own code, such as how an op runs on ragged storage: read from disk when a
    process before this one derived it under the same `key` (plain values naming the inputs
    of the derivation), in the same environment, and written there otherwise. A trace costs
    2-6 ms; Faster R-CNN's eager first step made 214. The cache off, or a key or value it
    cannot print exactly: `make()`, kept nowhere. Inside a trace the axis environment is keyed
    by its type only (as a program's is): a value must not depend on named axes."""
    folder = store.folder(_VALUES)
    if folder is None or _trace_context is None or not _plain_value(key):
        return make()
    text = repr((store.scope(_Owner.packages, _printable(_trace_context())), what, key))
    path = store.path_of(folder, text)
    found = store.read_value(path, text)
    if found is not store.MISSING:
        return found
    value = make()
    store.write_value(path, text, value)
    return value


class Kept:
    """`jax.jit(fn)` for a program eager runs outside its ops (a filled or ranged array), kept
    on disk like an op's when the cache is on at its first call. `name` and the plain values
    `key` name the program: `fn` must be this package's code and depend on nothing else."""

    __slots__ = ("fn", "name", "key", "call")

    def __init__(self, name: str, fn: Callable, key: tuple):
        self.fn, self.name, self.key = fn, name, key
        self.call: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self.call is None:
            # (the cache off: plain, options and all, which may run in a trace)
            self.call = wrap(self.fn, ("eager." + self.name,), self.key,
                             base_compile_options() or None, ()) or jax.jit(self.fn)
        return self.call(*args)


class Persistent:
    """A jitted op whose executables, per abstract signature of the arguments (and jax's trace
    settings), come from disk when present. Calls inside a trace, or with arguments it cannot
    key, go to `plain`. `prefetch` starts getting one on the compile pool before its call."""

    __slots__ = ("jitted", "plain", "program", "name", "loaded", "started", "__weakref__")

    def __init__(self, jitted: Jit, plain: Jit, program: str, name: str):
        self.jitted, self.plain, self.program, self.name = jitted, plain, program, name
        self.loaded: dict[tuple, Callable] = {}
        self.started: dict[tuple, compile_pool.Task] | None = None  # by `prefetch`, not used yet

    def _cache_size(self) -> int:  # as a jitted function reports it (compiled specializations)
        # `_cache_size` is a method of jax's jitted functions that `jax.stages.Wrapped` leaves out
        return len(self.loaded) + self.plain._cache_size()

    def __call__(self, *args: Any) -> Any:
        signature = _signature(args)
        if signature is None or _Owner.capturing():
            return self.plain(*args)
        key = (_trace_context(), signature)
        fn = self.loaded.get(key)
        if fn is None:
            fn = self.loaded[key] = self._executable(key, args)
        return fn(*args)

    def prefetch(self, *args: Any) -> None:
        """Start getting the program a call with arguments like `args` will run (arrays, or
        `jax.ShapeDtypeStruct`s for arrays not made yet: a backward's cotangents): read on
        the compile pool (`compile_pool.py`), or lowered here and compiled there. That call
        waits for it. Only until the first program is in use: after that, asking would cost
        every step what it saves once (the hot path of a recorded op)."""
        if self.loaded or _Owner.capturing():
            return
        args = jax.tree.map(_abstract, args)  # (the pool holds no array a step may donate)
        signature = _signature(args)
        if signature is None:
            return
        key = (_trace_context(), signature)
        started = self.started = self.started or {}
        where = None if key in started else self._where(key)
        if where is None:
            return
        if where[0].exists():  # read on the pool; a compile waits its turn (`compile_pool`)
            started[key] = compile_pool.Task(lambda: self._read(where))
            return
        job = self._compiler(where, args)
        if job is not None:
            started[key] = compile_pool.Task(job, ahead=True)

    def _compiler(self, where: tuple[Any, str], args: tuple) -> Callable[[], Any] | None:
        """A job that compiles and stores the program for `args`, lowered now: in this thread,
        whose jax settings shape it (a pool thread has its own). None if it does not lower."""
        try:
            lowered = self.jitted.get().lower(*args)
        except Exception:  # noqa: BLE001 - the call lowers it again, and raises there as ever
            return None
        return lambda: self._compiled(where, lowered)

    def _executable(self, key: tuple, args: tuple) -> Callable:
        """The compiled program for `key` (trace settings, signature): started by `prefetch`,
        from disk, or compiled now and stored."""
        task = self.started.pop(key, None) if self.started else None
        if task is not None and task.error() is None:  # (else: failed there, raised here)
            compiled = task.result()
            if compiled is not None:
                return compiled
        where = self._where(key)
        if where is None:
            return self.plain
        found = self._read(where)
        return found if found is not None else self._compiled(where, self.jitted.get().lower(*args))

    def _where(self, key: tuple) -> tuple[Any, str] | None:
        """The file and the full key text of the program for `key`, or None: not kept."""
        folder = cache_dir()
        if folder is None or not store.one_device():  # e.g. jax.distributed started meanwhile
            return None
        context, signature = key
        text = repr((store.scope(_Owner.packages, _printable(context)), self.program, signature))
        return store.path_of(folder, text), text

    def _read(self, where: tuple[Any, str]) -> Any:
        """The program stored at `where`, or None."""
        path, text = where
        start = time.perf_counter()
        found = store.read(path, text)
        if found is None:
            return None
        jax.monitoring.record_event(HIT_EVENT)
        jax.monitoring.record_event_duration_secs(LOAD_EVENT, time.perf_counter() - start,
                                                  fun_name=self.name)
        return found[0]

    def _compiled(self, where: tuple[Any, str], lowered: jax.stages.Lowered) -> Any:
        """`lowered` compiled, and stored at `where` when compiled anew."""
        hits = store.jax_hits.count
        with compile_pool.needed_now():
            compiled = lowered.compile()
        if store.jax_hits.count == hits:  # see `_JaxHits`: only a fresh one serializes whole
            store.write(*where, compiled)
        return compiled


def _abstract(a: Any) -> Any:
    """A concrete array as its `jax.ShapeDtypeStruct` (what lowering reads of it); anything
    else as it is."""
    array: Any = _ARRAY[0] if _ARRAY else None
    if type(a) is array:
        return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
    return a


def _signature(args: Any) -> tuple | None:
    """What the compiled program depends on in `args`: structure, shapes, dtypes, weak types.
    None when an argument is a tracer or something this cache does not key."""
    out: list[Any] = []
    array = _ARRAY[0]
    for a in args:
        kind = type(a)
        if kind is array:
            out.append((a.shape, a.dtype, a.weak_type))
        elif kind in _SCALARS or a is None:
            out.append(kind.__name__)
        elif kind is tuple or kind is list:
            inner = _signature(a)
            if inner is None:
                return None
            out.append((kind.__name__, inner))
        elif kind is np.ndarray or isinstance(a, np.generic):
            out.append(("np", np.shape(a), a.dtype))
        elif kind is jax.ShapeDtypeStruct:  # an array to come (`Persistent.prefetch`)
            out.append((a.shape, a.dtype, a.weak_type))
        else:
            return None
    return tuple(out)


def _plain_value(value: Any) -> bool:
    """Whether `repr(value)` says all of it (and the same in every process)."""
    if isinstance(value, (tuple, list, frozenset)):
        return all(_plain_value(v) for v in value)
    if isinstance(value, dict):
        return all(_plain_value(k) and _plain_value(v) for k, v in value.items())
    if isinstance(value, slice):
        return _plain_value((value.start, value.stop, value.step))
    if isinstance(value, type):  # a scalar type such as jnp.float32 or np.int64
        return issubclass(value, np.generic) or value in _PLAIN
    return isinstance(value, _PLAIN)


def _printable(context: tuple) -> tuple:
    """A trace context as a key holds it: outside a trace its one unprintable part (the axis
    environment) is empty, so its type says all."""
    return tuple(v if _plain_value(v) else type(v).__name__ for v in context)


def _environment() -> str:
    """What shapes every executable besides the key: see `store.environment`."""
    return store.environment(_Owner.packages)
