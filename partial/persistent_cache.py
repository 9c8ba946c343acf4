"""jax's persistent compilation cache for everything this project compiles (segments, whole steps,
eager ops): a new process loads the executables an earlier one wrote instead of compiling them
again. `set_cache_dir` or the environment variable `PARTIAL_CACHE_DIR` (read at import) turns it on.
"""

from __future__ import annotations

import os

import jax
from jax.experimental.compilation_cache import compilation_cache

from .errors import CacheDirError

ENV_VAR = "PARTIAL_CACHE_DIR"


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Keep compiled executables in the directory `path` (created if missing), so that a later
    process with the same directory loads them instead of compiling: segments, `xla_trace` steps
    and eager ops alike, however small or fast to compile. `None` turns the cache off. May be
    called at any time; it applies to what compiles afterwards. The environment variable
    `PARTIAL_CACHE_DIR` does the same when `partial` is imported.

    The cache is trusted: whoever can write to the directory can make this process run their
    code, so keep it private (see jax's "Persistent compilation cache" guide).

    Args:
        path: a directory, or `None` to stop caching.

    Raises:
        CacheDirError: `path` is empty, or cannot be created or written to.

    Example:
        >>> import tempfile
        >>> set_cache_dir(tempfile.mkdtemp())  # compiled code now persists across processes
        >>> set_cache_dir(None)
    """
    directory = None if path is None else _usable_directory(path)
    if directory is not None:
        # jax's defaults skip executables compiled in under a second or smaller than a file-system
        # dependent size: nearly all of ours (eager ops, small segments), whose count is the cost.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_dir", directory)
    # jax opens the cache, and decides whether to use it at all, once at the first compile of the
    # process; resetting makes a change after that take effect (and `None` close the old one).
    compilation_cache.reset_cache()


def _usable_directory(path: str | os.PathLike[str]) -> str:
    """`path` as an absolute directory that exists and is writable, or `CacheDirError`."""
    text = os.fspath(path)
    if not text:
        raise CacheDirError("set_cache_dir(''): give a directory, or None to turn the cache off")
    directory = os.path.abspath(os.path.expanduser(text))  # a later chdir must not move it
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise CacheDirError(f"compilation cache directory {text!r} cannot be created: {e}; "
                            "give a writable directory, or None to turn the cache off") from e
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CacheDirError(f"compilation cache directory {text!r} is not writable; "
                            "give a writable directory, or None to turn the cache off")
    return directory


def set_from_environment() -> None:
    """Apply `PARTIAL_CACHE_DIR` if it is set and not empty (at import of `partial`)."""
    value = os.environ.get(ENV_VAR)
    if not value:
        return
    try:
        set_cache_dir(value)
    except CacheDirError as e:
        raise CacheDirError(f"{ENV_VAR}={value!r}: {e}") from e
