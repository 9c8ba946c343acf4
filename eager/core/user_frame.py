"""Finding the user's line: the innermost stack frame outside this project's packages, jax and
the standard library's plumbing, and how every message shows it ("file.py:12: `code`").

Eager's op errors (`op_errors.py`) and a capture's errors, break reports and recompilation
reasons (the `partial` package, through `eager.hooks`) all find and show it here.

>>> describe_location(("train.py", 12, "y = x @ w"))
'train.py:12: `y = x @ w`'
>>> describe_location(None)
'an unknown line'
"""

from __future__ import annotations

import contextlib
import functools as ft
import linecache
import os
import sys
from collections.abc import Callable
from types import FrameType

# The packages whose frames are not the user's (and whose own exceptions pass through as is).
PROJECT = ("eager", "xla_segments", "autograd_bridge", "partial")
_PLUMBING = ("jax", "jaxlib")
_STDLIB = (contextlib.__file__, ft.__file__, "<frozen")  # `with`, wrappers, importlib

Location = tuple[str, int, str]  # (file, line number, source line)


def project_dirs() -> tuple[str, ...]:
    """The folders of the project's packages that are imported (only they can be on the stack;
    looked up by name, so that eager imports none of the packages above it)."""
    return _dirs(PROJECT)


def _dirs(packages: tuple[str, ...]) -> tuple[str, ...]:
    files = (getattr(sys.modules.get(name), "__file__", None) for name in packages)
    return tuple(os.path.dirname(f) + os.sep for f in files if f)


_skip: tuple[str, ...] = ()


def _skipped() -> tuple[str, ...]:
    """The prefixes of files that are not the user's; kept once every package is imported (the
    lazy engine asks at each break of each call)."""
    global _skip
    if _skip:
        return _skip
    dirs = _dirs(PROJECT + _PLUMBING)
    skip = (*dirs, *_STDLIB)
    if len(dirs) == len(PROJECT + _PLUMBING):
        _skip = skip
    return skip


def find_user_frame(depth: int = 1,
                    passing: Callable[[FrameType], None] | None = None) -> FrameType | None:
    """The innermost frame in user code, starting `depth` frames above the caller (None when
    there is none); `passing`, when given, sees each skipped frame on the way out."""
    frame: FrameType | None = sys._getframe(depth)
    skip = _skipped()
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        if passing is not None:
            passing(frame)
        frame = frame.f_back
    return frame


def location(frame: FrameType | None) -> Location | None:
    """`frame`'s (file, line number, source line), or None."""
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    return filename, frame.f_lineno, linecache.getline(filename, frame.f_lineno).strip()


def user_location() -> Location | None:
    """(file, line number, source line) of the innermost frame in user code, or None."""
    return location(find_user_frame(2))


def describe_location(where: Location | None) -> str:
    """'file.py:12: `code`' (or 'an unknown line' when no user frame was found)."""
    if where is None:
        return "an unknown line"
    filename, lineno, line = where
    code = f": `{line}`" if line else ""
    return f"{short_path(filename)}:{lineno}{code}"


def short_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive
        return filename
    return filename if rel.startswith("..") else rel
