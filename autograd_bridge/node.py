"""`SegmentFunction`: a compiled segment called on Tensors, as one node of the eager tape.

When a GradManager records and some input needs a gradient, the call runs the segment's training
forward, keeps its residuals in one tape node and returns Tensors whose gradient history is that
node; the eager backward pass hands the node the output cotangents (zeros for outputs nobody
used) and it runs the segment's backward executable once; an input that only unused outputs
depend on gets no gradient (None, as the eager tape gives). Otherwise the inference forward runs
and nothing is kept. Each call records its own node, so a segment may run several times before
one backward (shared weights).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

import eager
from xla_segments import Segment

_hooks = eager.hooks
_profiling = eager.hooks.profiling
_zeros = jnp.zeros


def _no_cotangent(shape: tuple, dtype: Any) -> Any:
    """Zeros for an output whose gradient nobody gave, made as `eager.zeros` makes them: a
    program kept on disk with the persistent cache, so a new process loads it instead of
    compiling jax's own per shape (Faster R-CNN's first step in a warm process spent 0.9 s
    on 21 of those)."""
    return eager.read(eager.zeros(shape, dtype))


class SegmentFunction:
    """Call `segment` on Tensors with gradient tracking.

    Args:
        segment: the compiled function.
        deps: per output, the indices of the inputs it depends on differentiably (empty for
            outputs that never carry a gradient: integers, statistics, stop_gradient results).
        name: the tape node's name (shown in errors about freed graphs).
        finisher: optional `(manager, tensors, grads, sole) -> grads`, given the GradManager
            running the backward, the differentiated input Tensors, their gradients (arrays or
            None) and which of them get a gradient from this call alone; it may return those
            as `eager.hooks.Finished` with the manager's callbacks applied (compiled).
    """

    __slots__ = ("segment", "deps", "name", "finisher", "_plans", "_forward", "_last")

    def __init__(self, segment: Segment, deps: Sequence[frozenset[int]], name: str,
                 finisher: Callable | None = None):
        self.segment = segment
        self.deps = tuple(frozenset(d) for d in deps)
        self.name = name
        self.finisher = finisher
        self._plans: dict[tuple[int, ...], tuple | None] = {}
        self._forward: Any = None
        self._last: tuple | None = None  # (inputs, outputs) differentiated by the last call

    def wrt(self, tensors: Sequence[eager.Tensor | None]) -> tuple[int, ...]:
        """The positions of the inputs that need a gradient now (none when nothing records)."""
        if not _hooks.is_recording():
            return ()
        needs = _hooks.needs_grad
        return tuple(i for i, t in enumerate(tensors) if t is not None and needs(t))

    def __call__(self, arrays: Sequence[Any], tensors: Sequence[eager.Tensor | None],
                 wrt: tuple[int, ...] | None = None) -> list[eager.Tensor]:
        """Run on `arrays` (one per input; `tensors[i]` is the Tensor input i came from, or
        None) and return one Tensor per output. `wrt` may be passed when already computed."""
        if wrt is None:
            wrt = self.wrt(tensors)
        plan = self._plan(wrt) if wrt else None
        wrap = _hooks.wrap
        if plan is None:
            return self.infer(arrays)
        fwd, bwd, used, diff_outputs, reach, higher, layouts = plan
        self._last = (used, diff_outputs)
        outs, residuals = _profiling.run("compiled forward", self.name, fwd, *arrays)
        results = [wrap(o) for o in outs]
        avals = [(o.shape, o.dtype) for o in (outs[j] for j in diff_outputs)]

        def backward(cotangents: list) -> Any:
            got = [k for k, c in enumerate(cotangents) if c is not None]
            if not got:
                return [None] * len(used)
            if layouts is None:
                cts = tuple(_no_cotangent(*avals[k]) if c is None else c
                            for k, c in enumerate(cotangents))
            else:
                cts = tuple(_laid_out(c, avals[k], layouts[k]) for k, c in enumerate(cotangents))
            grads = _profiling.run("compiled backward", self.name, bwd, residuals, cts)
            if len(got) == len(cts):
                return grads
            # An input that only outputs nobody used depend on gets None, as in eager.
            reached = frozenset().union(*(reach[k] for k in got))
            return [g if i in reached else None for i, g in enumerate(grads)]

        as_op = None if higher is None else (higher, (), used, tuple(arrays))
        inputs = [tensors[i] for i in used]
        finish = None
        if self.finisher is not None:
            finisher = self.finisher

            def finish(cotangents: list, sole: list, manager: Any) -> Any:
                return finisher(manager, inputs, backward(cotangents), sole)

        _hooks.make_node(self.name, inputs, [results[j] for j in diff_outputs], backward,
                         sparse=True, op=as_op, finish=finish)
        return results

    def infer(self, arrays: Sequence[Any]) -> list[eager.Tensor]:
        """Run the inference forward on `arrays`: no residuals kept, no tape node."""
        forward = self._forward
        if forward is None:
            forward = self._forward = self.segment.forward().compiled
        return [_hooks.wrap(o) for o in _profiling.run("compiled forward", self.name, forward,
                                                       *arrays)]

    def last_signature(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(inputs, outputs) differentiated by the last call that recorded a tape node (the
        `Segment.vjp` signature it ran), or None if no call did."""
        return self._last

    def _plan(self, wrt: tuple[int, ...]) -> tuple | None:
        """(forward, backward, inputs differentiated, outputs differentiated) for the inputs
        `wrt` that need a gradient, or None when no output depends on any of them."""
        if wrt in self._plans:
            return self._plans[wrt]
        wanted = frozenset(wrt)
        diff_outputs = tuple(j for j, d in enumerate(self.deps) if d & wanted)
        used = tuple(i for i in wrt if any(i in self.deps[j] for j in diff_outputs))
        plan = None
        if diff_outputs:
            fwd, bwd = self.segment.vjp(used, diff_outputs)
            # per differentiated output, the positions in `used` of the inputs it depends on
            reach = [frozenset(k for k, i in enumerate(used) if i in self.deps[j])
                     for j in diff_outputs]
            local = self.segment.options.per_rank is not None  # runs on each rank's arrays
            plan = (fwd.compiled, bwd.compiled, used, diff_outputs, reach,
                    self._as_op(diff_outputs), None if local else _cotangent_layouts(bwd))
        self._plans[wrt] = plan
        return plan

    def _as_op(self, diff_outputs: tuple[int, ...]) -> Any:
        """The segment's differentiated outputs as an eager `Op` (not registered), so a
        backward recorded by an outer GradManager differentiates the segment again (jax
        differentiates its vjp: second-order gradients through compiled code). None for a
        per-rank segment, whose function only runs under its mesh."""
        if self.segment.options.per_rank is not None:
            return None
        fn = self.segment.fn

        def outputs(*inputs: Any) -> tuple:
            outs = fn(*inputs)
            return tuple(outs[j] for j in diff_outputs)

        return eager.Op(f"{self.name}.differentiated", outputs, multi_output=True)


def _cotangent_layouts(bwd: Any) -> tuple | None:
    """The shardings the backward executable was compiled for its cotangents, when they span
    several devices (None otherwise).

    The backward is compiled ahead of time with each cotangent laid out as the forward's
    output was; the gradient that eager code hands back may be laid out otherwise (a head
    computed replicated on an output that XLA sharded), so it is moved there first."""
    if jax.device_count() == 1:  # nothing spans several (nor waits for a backward being read)
        return None
    shardings = getattr(bwd.compiled, "input_shardings", None)
    if shardings is None:
        return None
    layouts = tuple(shardings[0][1])  # None for a cotangent the executable does not take
    return layouts if any(s is not None and len(s.device_set) > 1 for s in layouts) else None


def _laid_out(c: Any, aval: tuple, sharding: Any) -> Any:
    """Cotangent `c` (zeros if None) laid out by `sharding` (None: as it is)."""
    if c is None:
        return _zeros(*aval, device=sharding)
    if (sharding is None or isinstance(c, jax.core.Tracer) or c.sharding == sharding
            or c.sharding.is_equivalent_to(sharding, c.ndim)):
        return c
    return jax.device_put(c, sharding)
