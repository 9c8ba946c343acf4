"""Eager ops' executables kept on disk under a key made before tracing.

jax's persistent compilation cache is keyed by the lowered program, so a process that finds every
executable there still traces and lowers each one to learn its key: on 2 cores 10-40 ms per eager
op (an MLIR context alone is 5 ms), 0.3-0.5 s before a detection head's first step ends, however
warm the cache. A built-in op's program is fixed by what this key holds: the op's name (and the
variant: forward, the vjp of some inputs, a ragged kind), its static attributes, the abstract
values of its arguments, its XLA options, the source of the `eager` package that defines it, and
the versions and settings of jax, jaxlib and the machine. So when jax's persistent cache is on
(`partial.set_cache_dir`, or jax's own `jax_compilation_cache_dir`), a built-in op's first call
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
cache). Like jax's cache, the directory is trusted: keep it private.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import importlib.metadata
import os
import pickle
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import serialize_executable

try:  # the settings that shape a trace (x64, matmul precision, ...), as jit's own cache keys them
    from jax._src.config import trace_context as _trace_context
except ImportError:  # another jax: nothing is kept, rather than keyed without them
    _trace_context = None

from ..context import current

HIT_EVENT = "/eager/persistent_cache/hits"
LOAD_EVENT = "/eager/persistent_cache/load_duration"
_SUBDIR = "eager-ops"
_FORMAT = 1  # bump when what a file holds changes
_PLAIN = (bool, int, float, complex, str, type(None), np.dtype, enum.Enum)
_SCALARS = (bool, int, float, complex)
_ARRAY: list[type] = []  # jax's concrete array type, found at the first wrap (the backend is up)


def cache_dir() -> str | None:
    """Where the eager ops' executables live now: a folder of jax's persistent cache, or None."""
    # jax's options are dynamic attributes of `jax.config`, which its annotations do not declare
    directory = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    if not directory or not jax.config.jax_enable_compilation_cache:  # type: ignore[attr-defined]
        return None
    return os.path.join(directory, _SUBDIR)


def wrap(fn: Callable, plain: Callable, ident: tuple, key: tuple, options: dict | None,
         donate: tuple[int, ...]) -> Persistent | None:
    """The op function `fn` with static attributes `key` as an eager call runs it: through the
    disk cache, with `plain` (its `jax.jit`) for calls in a trace. None when the cache is off
    or cannot key this program: the caller keeps its plain jit."""
    if _trace_context is None or cache_dir() is None or not _one_device():
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
    jitted = jax.jit(own, donate_argnums=donate, compiler_options=options)
    program = repr((ident, donate, key, sorted((options or {}).items())))
    return Persistent(jitted, plain, program, f"jit({name})")


class Persistent:
    """A jitted op whose executables, per abstract signature of the arguments (and jax's trace
    settings), come from disk when present. Calls inside a trace, or with arguments it cannot
    key, go to `plain`."""

    __slots__ = ("jitted", "plain", "program", "name", "loaded", "__weakref__")

    def __init__(self, jitted: jax.stages.Wrapped, plain: Callable, program: str, name: str):
        self.jitted, self.plain, self.program, self.name = jitted, plain, program, name
        self.loaded: dict[tuple, Callable] = {}

    def _cache_size(self) -> int:  # as a jitted function reports it (compiled specializations)
        # `_cache_size` is a method of jax's jitted functions that `jax.stages.Wrapped` leaves out
        return len(self.loaded) + self.plain._cache_size()  # type: ignore[attr-defined]

    def __call__(self, *args: Any) -> Any:
        signature = _signature(args)
        if signature is None or current() is not None:
            return self.plain(*args)
        key = (_trace_context(), signature)
        fn = self.loaded.get(key)
        if fn is None:
            fn = self.loaded[key] = self._executable(key, args)
        return fn(*args)

    def _executable(self, key: tuple, args: tuple) -> Callable:
        """The compiled program for `key` (trace settings, signature): from disk, or compiled
        now and stored."""
        folder = cache_dir()
        if folder is None or not _one_device():  # e.g. jax.distributed started meanwhile
            return self.plain
        context, signature = key
        # outside a trace its one unprintable part (the axis environment) is empty
        context = tuple(v if _plain_value(v) else type(v).__name__ for v in context)
        settings = sorted((name, value) for name, value in jax.config.values.items()
                          if "cache" not in name and "log" not in name)  # these change no program
        text = repr((_environment(), settings, context, self.program, signature))
        path = Path(folder, hashlib.sha256(text.encode()).hexdigest() + ".bin")
        start = time.perf_counter()
        found = _read(path, text)
        if found is not None:
            jax.monitoring.record_event(HIT_EVENT)
            jax.monitoring.record_event_duration_secs(LOAD_EVENT, time.perf_counter() - start,
                                                      fun_name=self.name)
            return found
        hits = _jax_hits.count
        compiled = self.jitted.lower(*args).compile()
        if _jax_hits.count == hits:  # see `_JaxHits`: only a fresh executable serializes whole
            _write(path, text, compiled)
        return compiled


class _JaxHits(threading.local):
    """This thread's count of executables loaded from jax's own persistent cache. jaxlib 0.10.2
    serializes such an executable without its compiled functions (a process that loads the
    copy fails with "NOT_FOUND: Function ... not found" at the first call), so a program that
    jax's cache supplied is not copied into this one; jax's cache keeps serving it."""

    count = 0

    def on_event(self, event: str, **kwargs: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":  # sent by the compiling thread
            self.count += 1


_jax_hits = _JaxHits()
jax.monitoring.register_event_listener(_jax_hits.on_event)


def _one_device() -> bool:
    """Whether this process sees one device and is alone: an executable is built for its
    devices, and the ranks of a distributed run (sharing a cache directory) have others."""
    return jax.process_count() == 1 and jax.device_count() == 1


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


_ENVIRONMENT: list[str] = []


def _environment() -> str:
    """What shapes every executable and stays fixed in a process: jax's and jaxlib's versions,
    XLA's flags, the device and host CPU, and the source of `eager` (an op's function may call
    anything in the package)."""
    if not _ENVIRONMENT:
        package = Path(__file__).resolve().parent.parent
        source = hashlib.sha256()
        for file in sorted(package.rglob("*.py")):
            source.update(str(file.relative_to(package)).encode() + b"\0" + file.read_bytes())
        device = jax.devices()[0]
        _ENVIRONMENT.append(repr((
            _FORMAT, jax.__version__, importlib.metadata.version("jaxlib"), device.platform,
            device.device_kind, device.id, _cpu_flags(), platform.machine(),
            os.environ.get("XLA_FLAGS", ""), source.hexdigest())))
    return _ENVIRONMENT[0]


def _cpu_flags() -> str:
    """The host CPU's feature flags (an executable for XLA:CPU is built for them)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


def _read(path: Path, text: str) -> Callable | None:
    """The executable stored at `path` for key `text`, or None: absent, stored for another key
    (left), or unreadable (removed, so that later processes do not read it again)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        stored, payload, in_tree, out_tree = pickle.loads(data)
        if stored != text:
            return None
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # noqa: BLE001 - damaged: compiled anew
        with contextlib.suppress(OSError):  # a cache this process may only read
            path.unlink(missing_ok=True)
        return None


def _write(path: Path, text: str, compiled: Any) -> None:
    """Store `compiled` at `path` atomically (a reader never sees half a file); a cache that
    cannot be written costs only the next process's compile."""
    tmp = None
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((text, payload, in_tree, out_tree), f)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - e.g. a read-only or full disk: keep running
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
