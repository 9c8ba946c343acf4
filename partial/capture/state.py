"""`CaptureState`: the state of a `Capture` that its parts share, declared once.

`Capture` (`hooks.py`) is the eager hooks of one capture; its op log (`OpLog`, `op_log.py`)
and the classification of its outputs (`Outputs`, `outputs.py`) are parts of it written apart.
Each part reads state that `Capture.__init__` sets and the hooks fill in; this base class says
what each of those attributes is, for readers and for mypy (the op log's own, which only it
and `Capture` read, are declared on `OpLog`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..region import GradSlot, Lifted, Snapshots


class CaptureState:
    """The attributes `Capture`, `OpLog` and `Outputs` share (`Capture.__init__` sets them)."""

    kind: str  # "partial_trace" or "xla_trace", for messages
    differentiable: bool  # partial_trace: the capture records gradients privately
    on_break: Callable | None  # (capture, what, where) -> lazy hooks, or why it cannot
    outer_tape: tuple[int, int]  # the recording state outside the region
    marked_ids: set[int]  # ids of the inputs made differentiable leaves (partial_trace)
    # ----- the tensors the region touched, classified as it runs
    arg_index: dict[int, int]  # id(tensor) -> argument position
    source_of: dict[int, Lifted | GradSlot]  # id(tensor) -> source, for extra inputs
    made: dict[int, weakref.ref]  # tensors created in the region, while alive
    saved: Snapshots  # pre-existing tensors the region touched, as they were
    mutated: dict[int, Any]  # pre-existing tensors rebound, in order
    grads_written: dict[int, Any]  # id(owner) -> owner, for each `.grad` the region set
    attr_outputs: dict[tuple[int, str], tuple]  # (id, name) -> (module, name): tensor attrs

    def is_created(self, t: Any) -> bool:
        """Whether the tensor `t` was created in the region."""
        return id(t) in self.made
