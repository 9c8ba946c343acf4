"""The cache's size limit: least recently used entries go first.

A size limit (`PARTIAL_CACHE_MAX_SIZE`, e.g. `8G`, `500M`, or `set_max_size`; 4 GiB by default)
bounds the whole directory: this project's entries and jax's own. An entry's last use is its
file's mtime: this project's loads touch it (`store.read`); jax's own entries carry the time
they were written. A process that writes tallies what it wrote, and once the directory may be
over the limit it removes the oldest files until it is at 90% of it (so that it does not
scan again at the next write). Several processes may evict at once: a file already gone is
skipped, and a reader that lost the race to a deletion sees a miss and compiles.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

ENV_VAR = "PARTIAL_CACHE_MAX_SIZE"
DEFAULT = 4 << 30
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_lock = threading.Lock()
_state: dict[str, int | None] = {"limit": None, "tally": None}


def parse_size(text: str) -> int:
    """Bytes in `text`: a number with an optional K, M, G or T (powers of 1024) and B."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if match is None:
        raise ValueError(f"{text!r} is not a size: write bytes, or a number with K, M, G or T "
                         "(for example 4G or 500M)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def max_size() -> int:
    """The cache's size limit in bytes."""
    limit = _state["limit"]
    if limit is None:
        value = os.environ.get(ENV_VAR)
        limit = _state["limit"] = DEFAULT if not value else parse_size(value)
    return limit


def set_max_size(nbytes: int | str | None) -> None:
    """Bound the persistent cache at `nbytes` (an int, or text such as "8G"); `None` restores
    the default (`PARTIAL_CACHE_MAX_SIZE`, else 4 GiB). Least recently used entries go first.

    Example:
        >>> set_max_size("8G")
        >>> set_max_size(None)
    """
    size = parse_size(nbytes) if isinstance(nbytes, str) else nbytes
    if size is not None and size < 0:
        raise ValueError(f"set_max_size({nbytes!r}): a size limit is at least 0 bytes")
    with _lock:
        _state["limit"], _state["tally"] = size, None


def wrote(directory: Path, nbytes: int) -> None:
    """Note `nbytes` written into the cache `directory`; evict if it may be over the limit."""
    with _lock:
        tally = _state["tally"]
        if tally is None:  # first write of this process: measure what is there
            tally = size_of(directory)
        tally += nbytes
        limit = max_size()
        if tally > limit:
            tally = evict(directory, int(limit * 0.9))
        _state["tally"] = tally


def entries(directory: Path) -> list[tuple[float, int, Path]]:
    """(last use, size, path) of every file of the cache, oldest first."""
    found = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = Path(root, name)
            with contextlib.suppress(OSError):  # removed meanwhile by another process
                info = path.stat()
                found.append((info.st_mtime, info.st_size, path))
    return sorted(found)


def size_of(directory: Path) -> int:
    """Bytes the cache `directory` holds."""
    return sum(size for _, size, _ in entries(directory))


def evict(directory: Path, target: int) -> int:
    """Remove the least recently used files of `directory` until it holds at most `target`
    bytes; what it holds after."""
    found = entries(directory)
    total = sum(size for _, size, _ in found)
    for _, size, path in found:
        if total <= target:
            break
        if path.name == "runs.jsonl":  # the record of recent runs, not an entry
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        total -= size
    return total
