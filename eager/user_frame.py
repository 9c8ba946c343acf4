"""Finding the user's line: the innermost stack frame outside this project's packages, jax and
the standard library's plumbing, for error messages and recompilation reasons."""

from __future__ import annotations

import contextlib
import functools as ft
import linecache
import os
import sys

import jax

import autograd_bridge
import eager
import xla_segments

_SKIP = tuple(os.path.dirname(m.__file__) + os.sep
              for m in (eager, autograd_bridge, xla_segments, jax)) + (
    os.path.dirname(__file__) + os.sep, contextlib.__file__, ft.__file__)


def user_location(skip_extra: tuple[str, ...] = ()) -> tuple[str, int, str] | None:
    """(file, line number, source line) of the innermost frame in user code, or None."""
    frame = sys._getframe(1)
    skip = _SKIP + skip_extra
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(skip) and not filename.startswith("<frozen"):
            line = linecache.getline(filename, frame.f_lineno).strip()
            return filename, frame.f_lineno, line
        frame = frame.f_back
    return None


def describe_location(where: tuple[str, int, str] | None) -> str:
    """'file.py, line 12: `code`' (or 'an unknown line' when no user frame was found)."""
    if where is None:
        return "an unknown line"
    filename, lineno, line = where
    code = f": `{line}`" if line else ""
    return f"{short_path(filename)}, line {lineno}{code}"


def short_path(filename: str) -> str:
    """`filename` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive
        return filename
    return filename if rel.startswith("..") else rel
