"""Where compiled executables are kept: on by default, in a private per-user directory.

Every run of a script compiles the same programs again unless they are kept: tens of seconds
before a detector's first step on a small CPU. So the persistent cache is on unless turned off:

- `PARTIAL_CACHE_DIR` unset: `<platform cache location>/partial-trace` (`$XDG_CACHE_HOME` or
  `~/.cache` on Linux, `~/Library/Caches` on macOS, `%LOCALAPPDATA%` on Windows);
- `PARTIAL_CACHE_DIR=<dir>`: that directory; `PARTIAL_CACHE_DIR=` (empty): off;
- `set_cache_dir(path)` at any time, `set_cache_dir(None)` to turn it off.

The cache holds machine code that this process runs, so whoever can write to the directory can
make it run their code: a directory is used only when it belongs to this user and nobody else
can write to it, and a new one is created private (0700). The default directory, when it cannot
be used, turns the cache off with a warning (training never fails for want of a cache); a
directory the user names raises `CacheDirError` instead.

The cache is also jax's own persistent compilation cache (`jax_compilation_cache_dir`), which
keeps the programs this project does not key itself, in a folder named for this host's CPU
(`jax-<hash of its features>`): jax's key leaves the CPU out, and a home directory shared by
machines of different CPUs must not hand one the other's machine code. The setting is resolved
at the first compile that asks (`current()`), so importing the package changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import platform
import stat
import sys
import threading
import warnings

import jax
from jax.experimental.compilation_cache import compilation_cache

ENV_VAR = "PARTIAL_CACHE_DIR"
_UNSET = object()


class CacheDirError(OSError):
    """A cache directory that cannot be used: empty, not creatable, not writable, or not private
    to this user (the cache runs the code it holds)."""


class CacheWarning(UserWarning):
    """The default cache directory cannot be used: the process runs without a cache."""


_lock = threading.Lock()
_state: dict[str, object] = {"dir": _UNSET}


def default_dir() -> str:
    """The platform's per-user cache location, with a folder of this project's."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(base, "partial-trace")


def current() -> str | None:
    """The cache directory in force (resolving the default at the first call), or None: off."""
    directory = _state["dir"]
    if directory is _UNSET:
        with _lock:
            if _state["dir"] is _UNSET:
                _apply(_from_environment())
            directory = _state["dir"]
    return directory  # type: ignore[return-value]


def peek() -> str | None:
    """The cache directory in force if one was resolved already, without resolving it."""
    directory = _state["dir"]
    return None if directory is _UNSET else directory  # type: ignore[return-value]


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Keep compiled executables in the directory `path` (created private if missing), so that
    a later process with the same directory loads them instead of compiling: segments,
    `xla_trace` steps and eager ops alike. `None` turns the cache off. The cache is on by
    default (see the module docstring); this applies to what compiles afterwards.

    The cache is trusted: whoever can write to the directory can make this process run their
    code, so the directory must belong to this user and be writable by nobody else.

    Args:
        path: a directory, or `None` to stop caching.

    Raises:
        CacheDirError: `path` is empty, cannot be created or written to, or is not private.

    Example:
        >>> import tempfile
        >>> set_cache_dir(tempfile.mkdtemp())  # compiled code now persists across processes
        >>> set_cache_dir(None)
    """
    directory = None if path is None else usable_directory(path)
    with _lock:
        _apply(directory)


def _from_environment() -> str | None:
    """The directory `PARTIAL_CACHE_DIR` names (None when empty), or the default's: jax's own
    cache directory when the user set one, else the platform's location."""
    value = os.environ.get(ENV_VAR)
    if value is not None:
        if not value:
            return None
        try:
            return usable_directory(value)
        except CacheDirError as e:
            raise CacheDirError(f"{ENV_VAR}={value!r}: {e}") from e
    chosen = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    try:
        return usable_directory(chosen or default_dir())
    except CacheDirError as e:
        warnings.warn(f"compiled code is not kept between runs: {e}. Set {ENV_VAR} to a "
                      f"private directory, or to the empty string to silence this",
                      CacheWarning, stacklevel=3)
        return None


def _apply(directory: str | None) -> None:
    _state["dir"] = directory
    if directory is not None:
        # jax's defaults skip executables compiled in under a second or smaller than a file-system
        # dependent size: nearly all of ours (eager ops, small segments), whose count is the cost.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_dir",
                      None if directory is None else os.path.join(directory, jax_folder()))
    # jax opens its cache, and decides whether to use it at all, once at the first compile of
    # the process; resetting makes a change after that take effect (and `None` close the old).
    compilation_cache.reset_cache()


def host_features() -> str:
    """The host CPU's architecture and feature flags (an XLA:CPU executable is built for them)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        flags = platform.processor()
    return f"{platform.machine()} {flags.strip()}"


def jax_folder() -> str:
    """The folder of the cache directory that holds jax's own entries on this host."""
    return "jax-" + hashlib.sha256(host_features().encode()).hexdigest()[:12]


def usable_directory(path: str | os.PathLike[str]) -> str:
    """`path` as an absolute directory that exists, is writable and private to this user
    (created with mode 0700 where missing), or `CacheDirError` saying why not."""
    text = os.fspath(path)
    if not text:
        raise CacheDirError("an empty cache directory: give a directory, or None to turn the "
                            "cache off")
    directory = os.path.abspath(os.path.expanduser(text))  # a later chdir must not move it
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.stat(directory)
    except OSError as e:
        raise CacheDirError(f"cache directory {text!r} cannot be created: {e}; give a writable "
                            "directory, or None to turn the cache off") from e
    _check_private(text, directory, info)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CacheDirError(f"cache directory {text!r} is not writable; give a writable "
                            "directory, or None to turn the cache off")
    return directory


def _check_private(text: str, directory: str, info: os.stat_result) -> None:
    """Refuse a directory another user owns or can write to (POSIX; Windows keeps a user's
    local application data private by its own permissions)."""
    if not hasattr(os, "geteuid"):
        return
    if info.st_uid != os.geteuid():
        raise CacheDirError(
            f"cache directory {text!r} belongs to another user (uid {info.st_uid}): the cache "
            "holds machine code this process runs, so it must be your own; give a directory "
            "of yours, or None to turn the cache off")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheDirError(
            f"cache directory {text!r} can be written by other users (mode "
            f"{stat.S_IMODE(info.st_mode):o}): the cache holds machine code this process runs; "
            f"`chmod go-w {directory}`, or give a private directory")
