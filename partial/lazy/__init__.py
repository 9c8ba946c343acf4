"""The lazy engine: a region with graph breaks runs its Python on every call, recording ops
and running each stretch between breaks as a cached compiled piece; and the hand-over, by which
a capture that meets its first break becomes the lazy engine's first stretch.

`breaks.py` (`Breaks`) is the runner; `run.py` (`LazyRun`) the hooks that record; `stretch.py`
the records and their compilation; `handover.py` (`Handover`) and `replay.py` the hand-over. The
code map is `README.md` beside this file.
"""

from .breaks import Breaks
from .handover import Handover
from .run import LazyRun
from .stretch import Pending, Piece, Stretch, compile_stretch

__all__ = [
    "Breaks",
    "Handover",
    "LazyRun",
    "Pending",
    "Piece",
    "Stretch",
    "compile_stretch",
]
