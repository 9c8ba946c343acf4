"""`python -m partial.cache`: see and manage the persistent cache of compiled code.

    python -m partial.cache            # info: where it is, its size and limit, its entries,
                                       # and what recent runs loaded and compiled
    python -m partial.cache clear      # remove every entry (the directory stays)

A recent run that compiled much while an earlier run of the same command loaded is a sign the
cache is being missed: another jax, jaxlib or machine, changed code or XLA flags.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

import xla_segments

_KINDS = (("eager-ops", "eager ops' programs"), ("segments", "compiled regions' executables"),
          ("eager-values", "what eager learned by tracing (ragged plans)"))


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()] if directory.is_dir() else []


def info(directory: str, out: TextIO = sys.stdout) -> None:
    """Print where the cache is, its size against its limit, entries by kind and recent runs."""
    root = Path(directory)
    files = _files(root)
    total = sum(p.stat().st_size for p in files)
    print(f"cache directory: {root}", file=out)
    print(f"size: {_size(total)} of {_size(xla_segments.cache_max_size())} "
          f"(least recently used removed first)", file=out)
    for sub, what in _KINDS:
        print(f"  {sub + '/':<13} {len(_files(root / sub)):6d} {what}", file=out)
    jax_own = [p for p in files if p.parent.name.startswith("jax-") and p.name.endswith("-cache")]
    print(f"  {'(jax)':<13} {len(jax_own):6d} jax's own entries", file=out)
    runs = xla_segments.recent_runs(directory)[-10:]
    if not runs:
        print("recent runs: none recorded", file=out)
        return
    print("recent runs (newest last):", file=out)
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.get("time", 0)))
        print(f"  {when}  loaded {r.get('loaded', 0) + r.get('jax_hits', 0):5d}  "
              f"compiled {r.get('compiles', 0):5d} ({r.get('compile_seconds', 0):.1f} s)  "
              f"{r.get('command', '')[:60]}", file=out)


def clear(directory: str) -> int:
    """Remove every entry of the cache `directory` (it stays, empty and private); how many."""
    root = Path(directory)
    removed = 0
    for path in list(root.iterdir()) if root.is_dir() else []:
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir() and not path.is_symlink():
                removed += len(_files(path))
                shutil.rmtree(path)
            else:
                path.unlink()
                removed += 1
    return removed


def main(argv: list[str] | None = None) -> int:
    """The command line: `info` (the default) or `clear`."""
    parser = argparse.ArgumentParser(prog="python -m partial.cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", default="info", choices=("info", "clear"))
    args = parser.parse_args(argv)
    directory = xla_segments.cache_dir()
    if directory is None:
        print(f"the persistent cache is off ({_why_off()})")
        return 0
    if args.action == "clear":
        print(f"removed {clear(directory)} files from {directory}")
    else:
        info(directory)
    return 0


def _why_off() -> str:
    if os.environ.get("PARTIAL_CACHE_DIR") == "":
        return "PARTIAL_CACHE_DIR is set to the empty string"
    return "the default directory cannot be used: see the warning above"


if __name__ == "__main__":
    raise SystemExit(main())
