"""MegEngine's `megengine.core._config`: the compute and layout modes of ops, and `_override`,
which sets them for a block. Code reads and writes them as module attributes
(`_config._compute_mode = "float32"`).

Here `"float32"` compute mode is what float16 matmuls and convolutions do anyway on the CPU
(XLA accumulates in float32), and layouts are the compiler's, so the values change nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_compute_mode = "default"
_conv_format = "default"
_bn_format = "default"
_auto_format_convert = False


@contextlib.contextmanager
def _override(**flags: Any) -> Iterator[None]:
    """Set the named modes (`compute_mode="float32"`, `conv_format=...`) for the block."""
    names = {k: f"_{k}" for k in flags}
    unknown = [k for k, attr in names.items() if attr not in globals()]
    if unknown:
        raise TypeError(f"_override: unknown settings {unknown}; known: compute_mode, "
                        "conv_format, bn_format, auto_format_convert")
    before = {k: globals()[attr] for k, attr in names.items()}
    globals().update({names[k]: v for k, v in flags.items()})
    try:
        yield
    finally:
        globals().update({names[k]: v for k, v in before.items()})


def _get_actual_op_param(function_param: Any, config_param: Any) -> Any:
    """An op's own setting where it has one, else the global one (MegEngine's rule)."""
    return function_param if function_param != "default" else config_param
