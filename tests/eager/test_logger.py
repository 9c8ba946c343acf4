"""`eager.get_logger` / `set_log_file` / `set_log_level`, MegEngine's logging functions at the top
of `megengine` (the zoo's scripts call `mge.set_log_file(path)` before they log)."""

from __future__ import annotations

import io
import logging

import eager as eg


def test_set_log_file_takes_a_path_or_an_open_file(tmp_path):
    path = tmp_path / "log.txt"
    stream = io.StringIO()
    root = logging.getLogger("eager")
    before = list(root.handlers)
    try:
        eg.set_log_file(str(path))
        eg.set_log_file(stream)
        eg.get_logger("zoo").info("TRAIN %06d", 3)
        for handler in root.handlers[len(before):]:
            handler.flush()
        assert "TRAIN 000003" in path.read_text()
        assert "TRAIN 000003" in stream.getvalue()
    finally:
        for handler in root.handlers[len(before):]:
            root.removeHandler(handler)
            handler.close()


def test_set_log_level_silences_info():
    stream = io.StringIO()
    root = logging.getLogger("eager")
    handler = logging.StreamHandler(stream)
    root.addHandler(handler)
    try:
        eg.set_log_level("WARNING")
        eg.get_logger("zoo").info("hidden")
        eg.get_logger("zoo").warning("shown")
        assert stream.getvalue() == "shown\n"
    finally:
        eg.set_log_level(logging.INFO)
        root.removeHandler(handler)
