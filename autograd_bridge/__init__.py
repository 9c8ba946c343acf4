"""autograd_bridge: a compiled segment as one node of the eager tape.

`SegmentFunction(segment, deps, name)` calls an `xla_segments.Segment` on Tensors: under a
recording GradManager its training forward runs, the residuals stay in one tape node, and the
eager backward pass runs the segment's backward executable; otherwise the inference forward runs
and no residuals are kept.
"""

from .node import SegmentFunction

__all__ = ["SegmentFunction"]
