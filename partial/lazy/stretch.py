"""The lazy engine's records: `Stretch` (the ops recorded since the last break), `Pending` (the
placeholder a recorded op's Tensor holds until the stretch runs) and `Piece` (a stretch compiled:
`compile_stretch` turns its records into a pure function and that into a segment of the bridge).

A stretch's records say, for each op, its static attributes and where each input comes from
(`VALUE`: an earlier op of the stretch; `INPUT`: a concrete array, an input of the segment;
`NONE`), and whether the eager tape would have recorded it. Both the lazy hooks (`run.py`) and a
capture's hand-over (`handover.py`) build stretches; the runner (`breaks.py`) caches pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax

import eager as eg
from autograd_bridge import SegmentFunction
from eager.hooks import describe_location, user_location
from xla_segments import Segment, abstract, store_for_stretch

from ..compiled import compiled_segment
from ..errors import ValueReadError

_stop = jax.lax.stop_gradient

# Where an op input comes from: a value computed earlier in the stretch, an input, nothing.
VALUE, INPUT, NONE = 0, 1, 2
NO_INPUT = (NONE,)
START = ("the start of the region", None, None)


class Pending:
    """The placeholder a lazily recorded op returns: the abstract value of an array that the
    stretch's compiled segment computes at the next break."""

    __slots__ = ("aval", "index")

    def __init__(self, aval: Any, index: int):
        self.aval = aval
        self.index = index

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: self.aval.ndim)
    weak_type = property(lambda self: self.aval.weak_type)

    def __repr__(self) -> str:
        return (f"<pending {self.aval.str_short()}: the array of a tensor computed inside a "
                "traced region, which gets its value at the next break>")

    def _used_as_array(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueReadError(
            f"{describe_location(user_location())}: the array of a tensor computed inside a "
            "traced region was handed to jax or numpy directly; in a region with graph breaks "
            "it gets its value only at the next break. Use the framework's ops on the Tensor, "
            "or do this inside `with exclude_from_trace():`.")

    __array__ = _used_as_array


@dataclass(eq=False)
class Piece:
    """A compiled stretch: its segment, called through the bridge."""

    function: SegmentFunction
    wrt: tuple  # the inputs a gradient may flow to (tracked when recorded)
    key: tuple = ()  # set by the cache that holds it

    @property
    def segment(self) -> Segment:
        return self.function.segment

    @property
    def seconds(self) -> float:
        return self.segment.compile_seconds


class Stretch:
    """The ops recorded since the last break."""

    __slots__ = ("records", "counts", "out_avals", "nondiff", "specs", "avals", "inputs", "parents",
                 "slot_of", "holders", "site")

    def __init__(self, site: tuple):
        self.records: list = []  # (op, attrs, input descriptors, recorded)
        self.counts: list = []  # per record: how many values it produced
        self.out_avals: list = []  # per value
        self.nondiff: list = []  # per value: carries no gradient even when recorded
        self.specs: list = []  # per input: (guard spec, tracked)
        self.avals: list = []  # per input
        self.inputs: list = []  # per input: the array (or Python scalar)
        # per input: (tensor, node, out_idx) when tracked, else None
        self.parents: list[tuple[Any, Any, int] | None] = []
        self.slot_of: dict = {}  # (id(tensor), id(array), tracked) -> input position
        self.holders: list = []  # weak references to Tensors that got a placeholder
        self.site = site  # (why, file, line) of the break it starts at: messages, counts



def compile_stretch(st: Stretch, outputs: tuple, name: str, remat: bool | str = False) -> Piece:
    """A piece for the stretch: the replay of its records as a pure function, its segment and
    the gradient dependencies of its outputs."""
    plan = []
    deps: list[frozenset] = []
    tracked_inputs = [needs for _, needs in st.specs]
    for (op, attrs, descs, recorded), n_out in zip(st.records, st.counts):
        plan.append((op.jitted(attrs), descs, op.multi_output, op.differentiable and not recorded))
        acc: frozenset = frozenset()
        if recorded:
            found: set[int] = set()
            for d in descs:
                if d[0] == VALUE and d[2]:
                    found |= deps[d[1]]
                elif d[0] == INPUT and tracked_inputs[d[1]]:
                    found.add(d[1])
            acc = frozenset(found)
        for _ in range(n_out):
            deps.append(frozenset() if st.nondiff[len(deps)] else acc)

    def replay(*inputs: Any) -> list:
        values: list = []
        for fn, descs, multi, cut in plan:
            args = [(values[d[1]] if d[2] else _stop(values[d[1]])) if d[0] == VALUE
                    else inputs[d[1]] if d[0] == INPUT else None for d in descs]
            out = fn(*args)
            outs = out if multi else (out,)
            values.extend([_stop(o) for o in outs] if cut else outs)
        return [values[i] for i in outputs]

    in_avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type,
                                     sharding=abstract(x).sharding if hasattr(x, "shape")
                                     else None)  # a Python scalar has no placement
                for a, x in zip(st.avals, st.inputs)]
    store = store_for_stretch(st.records, (st.counts, st.nondiff, outputs, eg.conv_rewrites()))
    function = compiled_segment(replay, in_avals, name, [deps[i] for i in outputs], store,
                                remat=remat)
    wrt = tuple(i for i, needs in enumerate(tracked_inputs) if needs)
    return Piece(function, wrt)
