"""Compiled executables kept on disk under a key their owner makes before tracing.

jax's persistent compilation cache is keyed by the lowered program: a process that finds every
executable there still traces and lowers each one to learn its key. Whoever can say what a
program is without tracing it (an eager op by its name, attributes and argument types; a
captured region by its jaxpr) keeps its executables here instead, in a folder of jax's cache
directory, under that description plus everything else that shapes an executable: the versions
of jax and jaxlib, XLA's flags, the device and host CPU, and the source of the packages whose
code the description does not spell out (`environment`). This module is the storage those
owners share: `eager.core.ops`' persistent ops and `partial`'s segments.

Like jax's cache, the directory is trusted: keep it private.
"""

from __future__ import annotations

import contextlib
import copyreg
import hashlib
import importlib.metadata
import os
import pickle
import platform
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
from jax.experimental import serialize_executable

_FORMAT = 3  # bump when what a file holds changes


def folder(name: str) -> str | None:
    """The folder `name` of jax's persistent cache directory, or None when the cache is off."""
    # jax's options are dynamic attributes of `jax.config`, which its annotations do not declare
    directory = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    if not directory or not jax.config.jax_enable_compilation_cache:  # type: ignore[attr-defined]
        return None
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
            device.device_kind, device.id, _cpu_flags(), platform.machine(),
            os.environ.get("XLA_FLAGS", ""), source.hexdigest()))
    return _ENVIRONMENTS[key]


def _cpu_flags() -> str:
    """The host CPU's feature flags (an executable for XLA:CPU is built for them)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


def path_of(directory: str, text: str) -> Path:
    """The file that holds the executable described by `text`."""
    return Path(directory, hashlib.sha256(text.encode()).hexdigest() + ".bin")


def read(path: Path, text: str) -> tuple[Callable, Any] | None:
    """The executable stored at `path` for key `text` and what was kept beside it, or None:
    absent, stored for another key (left), or unreadable (removed, so that later processes do
    not read it again)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        stored, payload, in_tree, out_tree, extra = pickle.loads(data)
        if stored != text:
            return None
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree), extra
    except Exception:  # noqa: BLE001 - damaged: compiled anew
        with contextlib.suppress(OSError):  # a cache this process may only read
            path.unlink(missing_ok=True)
        return None


def write(path: Path, text: str, compiled: Any, extra: Any = None) -> None:
    """Store `compiled` at `path` atomically (a reader never sees half a file), with `extra`
    (plain data) beside it; a cache that cannot be written costs only the next process's
    compile."""
    tmp = None
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((text, payload, in_tree, out_tree, extra), f)
        os.replace(tmp, path)
    except Exception:  # noqa: BLE001 - e.g. a read-only or full disk: keep running
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


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
