"""The persistent cache as `partial` offers it: on by default (`xla_segments.cache_dir`),
moved or turned off with `set_cache_dir` or `PARTIAL_CACHE_DIR`, bounded by
`set_cache_max_size`; `python -m partial.cache` shows and clears it."""

from __future__ import annotations

import os

import xla_segments

from .errors import CacheDirError


def set_cache_dir(path: str | os.PathLike[str] | None) -> None:
    """Keep compiled executables in the directory `path` (created private if missing), or turn
    the cache off with `None`: `xla_segments.set_cache_dir`, raising this package's
    `CacheDirError`. The cache is on by default, in a per-user directory
    (`~/.cache/partial-trace` on Linux; `PARTIAL_CACHE_DIR` moves it, or turns it off when
    empty); whoever can write to the directory can make this process run their code.

    Example:
        >>> import tempfile
        >>> set_cache_dir(tempfile.mkdtemp())  # compiled code now persists across processes
        >>> set_cache_dir(None)
    """
    try:
        xla_segments.set_cache_dir(path)
    except xla_segments.CacheDirError as e:
        raise CacheDirError(str(e)) from e


def set_cache_max_size(nbytes: int | str | None) -> None:
    """Bound the persistent cache at `nbytes` (bytes, or text such as "8G" or "500M"); `None`
    restores the default (the environment variable `PARTIAL_CACHE_MAX_SIZE`, else 4 GiB).
    The least recently used executables are removed first.

    Example:
        >>> set_cache_max_size("8G")
        >>> set_cache_max_size(None)
    """
    xla_segments.set_cache_max_size(nbytes)


def resolve_at_import() -> None:
    """Apply `PARTIAL_CACHE_DIR` (or the default directory) now, at import of `partial`: a
    directory the user named that cannot be used is reported here, not at some first compile."""
    try:
        xla_segments.cache_dir()
    except xla_segments.CacheDirError as e:
        raise CacheDirError(str(e)) from e
