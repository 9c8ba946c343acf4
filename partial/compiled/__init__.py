"""The compiled entry: a captured program compiled for one guard key, and the runner that
serves the calls of a region without breaks.

`whole.py` (`WholeRegion`) looks a call up, captures and compiles on a miss, and hands a region
that breaks to the lazy engine it was given; `entry.py` (`Entry`) is one compiled program with
its guards and per-call work; `segment.py` builds a compiled region's tape node, for entries and
the lazy engine's pieces alike. The code map is `README.md` beside this file.
"""

from .entry import MISS, Entry, refuse_outer_gradients
from .gmcallback import CompiledCallbacks
from .introspection import EntryInfo, entry_info
from .segment import compiled_segment
from .whole import LazyStart, WholeRegion

__all__ = [
    "MISS",
    "Entry",
    "refuse_outer_gradients",
    "CompiledCallbacks",
    "EntryInfo",
    "entry_info",
    "compiled_segment",
    "LazyStart",
    "WholeRegion",
]
