"""What `fn.entries()` reports about each compiled entry: its executables' HLO, XLA's cost and
memory analyses, the bytes kept from forward to backward, compile time, and what the entry
depends on, in words.

>>> import eager as eg, eager.module as M
>>> from partial import partial_trace
>>> f = partial_trace(M.Linear(4, 2))
>>> _ = f(eg.ones((3, 4)))
>>> info = f.entries()[0]
>>> info.arguments
['x: Tensor[3, 4] float32']
>>> info.cost_analysis()["flops"] > 0
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xla_segments import Executable, Segment

from ..region import argument_paths
from ..region import leaf_text as describe_leaf

KINDS = ("forward", "forward_vjp", "backward")


@dataclass
class EntryInfo:
    """One compiled specialization of a traced function.

    Attributes:
        arguments: each argument leaf of the key it was compiled for, as "path: what".
        guards: what else it depends on (modules' structure and mode, optimizers, `.grad`
            presence, GradManagers), one line each.
        compile_seconds: capture plus compile time spent on it so far.
        residual_bytes: bytes the training forward keeps for the backward (None until it has
            run under a GradManager); `partial_trace(remat=...)` lowers it.
    """

    arguments: list[str]
    guards: list[str]
    compile_seconds: float
    residual_bytes: int | None
    segment: Segment = field(repr=False)
    signature: tuple | None = field(default=None, repr=False)  # the last (wrt, outputs) trained

    def executable(self, kind: str = "forward") -> Executable:
        """The executable of `kind`: "forward" (inference, compiled on demand), or
        "forward_vjp" / "backward" of the last gradient signature used in training."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if kind == "forward":
            return self.segment.forward()
        if self.signature is None:
            raise LookupError(f"this entry has no {kind} executable: it has not run under a "
                              "recording GradManager")
        fwd, bwd = self.segment.vjp(*self.signature)
        return fwd if kind == "forward_vjp" else bwd

    def hlo_text(self, kind: str = "forward", optimized: bool = False) -> str:
        """The StableHLO of the executable (`optimized=True`: the HLO after XLA's passes)."""
        return self.executable(kind).as_text(optimized)

    def cost_analysis(self, kind: str = "forward") -> dict:
        """XLA's cost estimate of the executable: "flops", "bytes accessed", ..."""
        cost = self.executable(kind).cost_analysis()
        if isinstance(cost, (list, tuple)):  # one per device in older jax
            cost = cost[0] if cost else {}
        return dict(cost or {})

    def memory_analysis(self, kind: str = "forward") -> Any:
        """XLA's memory estimate: `temp_size_in_bytes`, `argument_size_in_bytes`,
        `output_size_in_bytes`, ..."""
        return self.executable(kind).memory_analysis()


def entry_info(entry: Any, fn: Callable) -> EntryInfo:
    """The `EntryInfo` of a cached `Entry` of the traced function `fn`."""
    signature = entry.function.last_signature()
    return EntryInfo(
        arguments=describe_arguments(fn, entry.key),
        guards=([g.describe() for g in entry.guards] + [entry.arg_guard.describe()]
                + [f"{name} {value}" for name, value in entry.key[2:]]),  # e.g. autocast
        compile_seconds=entry.seconds,
        residual_bytes=(None if signature is None
                        else entry.segment.residual_bytes(*signature)),
        segment=entry.segment, signature=signature)


def describe_arguments(fn: Callable, key: tuple) -> list[str]:
    """Each argument leaf of guard key `key`, as "path: what" (`x: Tensor[3, 4] float32`)."""
    return [f"{path}: {describe_leaf(spec)}" for path, spec in argument_paths(fn, key)]
