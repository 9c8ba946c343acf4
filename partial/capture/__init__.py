"""Capture: a region's Python run once under `jax.make_jaxpr`, described as a `Program`.

`capture()` (`run.py`) runs it with the `Capture` hooks, whose op log (`op_log.py`) lets the
lazy engine take the call over at a first break through the `on_break` callback the capture is
given; `outputs.py` classifies what the region returned and changed, and `program.py` makes the
`Program` the compiled entry is built from. The code map is `README.md` beside this file.
"""

from .hooks import BreakFound, HandedOver
from .op_log import Backward, GradWrite, Recording, ops_of
from .program import Program
from .run import capture

__all__ = [
    "Backward",
    "GradWrite",
    "Recording",
    "ops_of",
    "Program",
    "BreakFound",
    "HandedOver",
    "capture",
]
