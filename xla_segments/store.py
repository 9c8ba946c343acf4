"""Compiled executables kept on disk under a key their owner makes before tracing.

jax's persistent compilation cache is keyed by the lowered program: a process that finds every
executable there still traces and lowers each one to learn its key. Whoever can say what a
program is without tracing it (an eager op by its name, attributes and argument types; a
captured region by its jaxpr) keeps its executables here instead, in a folder of the cache
directory (`cache_location.py`), under that description plus everything else that shapes an
executable: the versions of jax and jaxlib, XLA's flags, the device and host CPU, and the
source of the packages whose code the description does not spell out (`environment`).

An entry is machine code this process will run, so it is verified before anything in it is
unpickled or loaded: a file is a magic tag, the SHA-256 of the rest, and the rest. A flipped
bit, a truncated copy or another program's file is refused (removed where this process may)
and the executable compiled again; unverified, such a file killed the process (SIGILL, SIGSEGV
or an abort inside XLA's loader). Writes are atomic (a reader never sees half a file), so
several processes can fill one directory; a load marks its file used (its mtime), which the
size limit's least-recently-used eviction (`eviction.py`) reads.

Beside executables it keeps small literal values derived by tracing the same code under the same
kind of key (`read_value`, `write_value`): framed and verified alike under a tag of their own
(`VALUE_MAGIC`), parsed as literals, and written only when their text reads back as themselves.
"""

from __future__ import annotations

import ast
import contextlib
import copyreg
import hashlib
import importlib.metadata
import os
import pickle
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
from jax.experimental import serialize_executable

from . import cache_location, cache_stats, eviction

_FORMAT = 4  # bump when what a file holds changes
MAGIC = b"PTXC\x04\n"  # then the SHA-256 of the body, then the body (a pickle)
VALUE_MAGIC = b"PTXV\x01\n"  # a value's file: then the digest, then the text of a literal
_DIGEST = hashlib.sha256().digest_size


# Told the cache directory at each use (`preload.py` starts reading ahead at the first).
first_use: list[Callable[[str], None]] = []


def folder(name: str) -> str | None:
    """The folder `name` of the cache directory, or None when the cache is off."""
    directory = cache_location.current()
    if directory is None:
        return None
    for hook in first_use:
        hook(directory)
    return os.path.join(directory, name)


def one_device() -> bool:
    """Whether this process sees one device and is alone: an executable is built for its
    devices, and the ranks of a distributed run (sharing a cache directory) have others."""
    return jax.process_count() == 1 and jax.device_count() == 1


def settings() -> list:
    """jax's settings that can change a program (not the cache's or logging's own)."""
    return sorted((name, value) for name, value in jax.config.values.items()
                  if "cache" not in name and "log" not in name)


_ENVIRONMENTS: dict[tuple, str] = {}


def environment(packages: Sequence[str]) -> str:
    """What shapes every executable and stays fixed in a process: jax's and jaxlib's versions,
    XLA's flags, the device and host CPU, and the source of the named top-level `packages`
    (a program may call anything in them). Computed once per process and set of packages."""
    key = tuple(packages)
    if key not in _ENVIRONMENTS:
        root = Path(__file__).resolve().parent.parent
        source = hashlib.sha256()
        for package in key:
            for file in sorted((root / package).rglob("*.py")):
                source.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes())
        device = jax.devices()[0]
        _ENVIRONMENTS[key] = repr((
            _FORMAT, jax.__version__, importlib.metadata.version("jaxlib"), device.platform,
            device.device_kind, device.id, cache_location.host_features(),
            os.environ.get("XLA_FLAGS", ""), source.hexdigest()))
    return _ENVIRONMENTS[key]


_SCOPES: dict[tuple, str] = {}
_MAX_SCOPES = 64


def scope(packages: Sequence[str], context: tuple) -> str:
    """A digest of what every key made now in this thread shares: `environment(packages)`,
    jax's `settings()` and the trace `context` in the printable form a key holds. Keys hold it
    instead of the text itself (5-6 KB, 0.1 ms to print and hash at each of the hundreds of
    programs a warm first step loads); remembered per value of jax's settings, which a process
    rarely changes."""
    values = tuple(jax.config.values.values())
    # what the text holds, with types: equal tuples of other types (1, True) print apart
    seen = (tuple(packages), context, tuple(map(type, context)), values,
            tuple(map(type, values)))
    try:
        found, hashable = _SCOPES.get(seen), True
    except TypeError:  # a setting (of another jax) that cannot be hashed: not remembered
        found, hashable = None, False
    if found is None:
        text = repr((environment(packages), settings(), context))
        found = hashlib.sha256(text.encode()).hexdigest()
        if hashable:
            if len(_SCOPES) >= _MAX_SCOPES:
                _SCOPES.clear()
            _SCOPES[seen] = found
    return found


def path_of(directory: str, text: str) -> Path:
    """The file that holds the executable described by `text`."""
    return Path(directory, hashlib.sha256(text.encode()).hexdigest() + ".bin")


# Filled by `preload.py`: entry -> a function giving what `_load` gives for it (read ahead on
# the compile pool while the process builds its model); `used`: the entries this process read
# or wrote, in order (what the next run of the same command reads ahead).
preloaded: dict[Path, Callable[[], tuple | None]] = {}
used: dict[Path, None] = {}


def read(path: Path, text: str) -> tuple[Callable, Any] | None:
    """The executable stored at `path` for key `text` and what was kept beside it, or None:
    absent, stored for another key (left: it is that key's), or damaged (removed, so that later
    processes do not read it again). Nothing is unpickled or loaded before the digest of the
    whole file checks."""
    early = preloaded.pop(path, None)
    got = early() if early is not None else None
    if got is None or got[0] != text:
        got = _load(path, text)
    if got is None or got[0] != text:
        return None
    _, loaded, extra = got
    with contextlib.suppress(OSError):  # used now: the last to be evicted
        os.utime(path)
    used[path] = None
    cache_stats.loaded()
    return loaded, extra


def _load(path: Path, text: str | None = None) -> tuple | None:
    """(key text, executable, extra) of the entry at `path`, or None: absent or damaged
    (removed). With `text`, an entry of another key is not deserialized (its executable None)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    body = verified(data)
    if body is None:
        _discard(path)
        return None
    try:
        stored, payload, in_tree, out_tree, extra = pickle.loads(body)
        if text is not None and stored != text:
            return stored, None, None
        loaded = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # noqa: BLE001 - written by another version: compiled anew
        _discard(path)
        return None
    return stored, loaded, extra


def verified(data: bytes, magic: bytes = MAGIC) -> bytes | None:
    """The body of a stored file (an executable's; a value's with `VALUE_MAGIC`) whose digest
    matches it, else None."""
    head = len(magic) + _DIGEST
    if len(data) < head or not data.startswith(magic):
        return None
    body = memoryview(data)[head:]
    if hashlib.sha256(body).digest() != data[len(magic):head]:
        return None
    return bytes(body)


def framed(body: bytes, magic: bytes = MAGIC) -> bytes:
    """What a file holds for `body`: the magic tag, its digest, itself."""
    return magic + hashlib.sha256(body).digest() + body


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):  # a cache this process may only read
        path.unlink(missing_ok=True)


def write(path: Path, text: str, compiled: Any, extra: Any = None) -> None:
    """Store `compiled` at `path` atomically (a reader never sees half a file), with `extra`
    (plain data) beside it; a cache that cannot be written costs only the next process's
    compile."""
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        data = framed(pickle.dumps((text, payload, in_tree, out_tree, extra)))
    except Exception:  # noqa: BLE001 - e.g. an output tree that does not pickle: compiled
        return  # again by the next process, as with a cache that cannot be written
    if _put(path, data):
        used[path] = None


def _put(path: Path, data: bytes) -> bool:
    """Write `data` to `path` atomically; whether it was written."""
    tmp = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except Exception:  # noqa: BLE001 - e.g. a read-only or full disk: keep running
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return False
    with contextlib.suppress(Exception):  # the size limit's tally: checked again next write
        eviction.wrote(path.parent.parent, len(data))
    return True


#: What `read_value` returns for an entry it does not have.
MISSING = object()


def read_value(path: Path, text: str) -> Any:
    """The literal (numbers, strings, None, tuples and lists of them) stored at `path` for key
    `text`, or `MISSING`: absent, another key's, or damaged (removed). Parsed as a literal,
    never unpickled: reading a value runs nothing."""
    try:
        data = path.read_bytes()
    except OSError:
        return MISSING
    body = verified(data, VALUE_MAGIC)
    try:
        stored, value = ast.literal_eval(body.decode()) if body is not None else (None, None)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        body = None
    if body is None:
        _discard(path)
        return MISSING
    if stored != text:
        return MISSING
    with contextlib.suppress(OSError):  # used now: the last to be evicted
        os.utime(path)
    return value


def write_value(path: Path, text: str, value: Any) -> None:
    """Store the literal `value` at `path` for key `text` (see `read_value`); nothing for a
    value whose text does not read back as itself (a numpy scalar or dtype, NaN, a frozenset)."""
    body = repr((text, value))
    try:
        back = ast.literal_eval(body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return
    if _same(back[1], value):
        _put(path, framed(body.encode(), VALUE_MAGIC))


def _same(a: Any, b: Any) -> bool:
    """Whether `a` and `b` are equal and of the same types throughout (True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _pickle_auto_layout_by_name() -> None:
    """jax 0.12 pickles its `AutoLayout` singleton by value, so an executable read back
    returns arrays whose abstract value holds a second `AutoLayout`, equal to no other: jax's
    jit caches and this project's keys then took them for new avals and compiled again (a
    stretch after eager ops loaded from here). Pickled by name, it is the singleton again."""
    try:
        from jax._src import layout
    except ImportError:  # another jax: nothing to mend
        return
    auto = getattr(layout, "AutoLayout", None)
    if auto is not None and not isinstance(auto, type):
        copyreg.pickle(type(auto), lambda _: "AutoLayout")


_pickle_auto_layout_by_name()


class _JaxHits(threading.local):
    """This thread's count of executables loaded from jax's own persistent cache. jaxlib 0.10.2
    serializes such an executable without its compiled functions (a process that loads the
    copy fails with "NOT_FOUND: Function ... not found" at the first call), so a program that
    jax's cache supplied is not copied here; jax's cache keeps serving it."""

    count = 0

    def on_event(self, event: str, **kwargs: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":  # sent by the compiling thread
            self.count += 1


jax_hits = _JaxHits()
jax.monitoring.register_event_listener(jax_hits.on_event)
