"""Logging as MegEngine's `megengine.logger`: `get_logger(name)` gives a `logging.Logger` under
the "megengine"-style root of this project, with a level and a time-stamped format that scripts
share, and `set_log_level` changes the level of every logger it made.

>>> log = get_logger("train")
>>> log.name
'eager.train'
"""

from __future__ import annotations

import logging
import sys
from typing import IO

_ROOT = "eager"
_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"
_level = logging.INFO


def _root() -> logging.Logger:
    root = logging.getLogger(_ROOT)
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT, "%m-%d %H:%M:%S"))
        root.addHandler(handler)
        root.setLevel(_level)
        root.propagate = False
    return root


def get_logger(name: str | None = None) -> logging.Logger:
    """A logger named `name` below the project's root logger (which prints to stderr)."""
    _root()
    if not name:
        return logging.getLogger(_ROOT)
    return logging.getLogger(name if name.startswith(_ROOT + ".") else f"{_ROOT}.{name}")


def set_log_level(level: int | str, update_existing: bool = True) -> None:
    """Set the level of the root logger and, with `update_existing`, of every logger below it."""
    global _level
    _level = logging.getLevelName(level) if isinstance(level, str) else level
    _root().setLevel(_level)
    if update_existing:
        for name, logger in logging.root.manager.loggerDict.items():
            if name.startswith(_ROOT + ".") and isinstance(logger, logging.Logger):
                logger.setLevel(_level)


def set_log_file(fout: str | IO[str], mode: str = "a") -> None:
    """Also write every message to `fout`: a file name (opened with `mode`) or an open text
    file, as MegEngine's `megengine.set_log_file` takes either."""
    handler: logging.Handler = (logging.FileHandler(fout, mode) if isinstance(fout, str)
                                else logging.StreamHandler(fout))
    handler.setFormatter(logging.Formatter(_FORMAT, "%m-%d %H:%M:%S"))
    _root().addHandler(handler)
