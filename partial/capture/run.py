"""`capture()`: run a region once under `jax.make_jaxpr` with the `Capture` hooks installed
(`hooks.py`) and describe it as a `Program` (`program.py`); everything the capture touched is put
back before it returns or raises. A region handed over to the lazy engine at a break finishes
there and comes out as `HandedOver`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax

import eager as eg
import eager.distributed as dist
import eager.module as M

from ..region import Call, current_trace, release_trace
from .hooks import Capture, HandedOver
from .program import Program, build_program

hooks = eg.hooks


def capture(fn: Callable, args: tuple, kwargs: dict, call: Call, *, kind: str,
            differentiable: bool, capture_as_const: bool, graph_breaks: bool = False,
            on_break: Callable | None = None) -> Program:
    """Run `fn(*args, **kwargs)` once under `jax.make_jaxpr` and describe it as a `Program`.

    `call` is the flattened arguments (`guards.flatten_call`). The tensors, modules, optimizers,
    `.grad` slots and the RNG state are exactly as before when this returns or raises. At the
    region's first break, `on_break(capture, what, where)` gives the lazy hooks that run the
    rest of the call (then `HandedOver` is raised once the call is done), or says why none
    can (then `BreakFound` is raised and nothing ran).
    """
    start = time.perf_counter()
    eg.random.get_state()  # the key must exist before the region so it is an input, not baked
    saved_tape = hooks.tape_state()
    cap = Capture(kind, differentiable, graph_breaks, on_break, saved_tape)
    for o in call.objects:
        if isinstance(o, eg.optimizer.Optimizer):
            cap.see_optimizer(o)
    epoch = hooks.epoch()
    failed = True

    def region(*arg_arrays: Any) -> list:
        for t, a in zip(call.tensors, arg_arrays):
            cap.add_argument(t, a)
        hooks.set_tape_state((1, 0) if differentiable else (0, 0))
        trace = current_trace()
        try:
            with hooks.capturing(cap):
                out = _run(cap, fn, args, kwargs)
        except BaseException:  # a break handed over or found, or an error
            release_trace(trace)
            raise
        finally:
            hooks.set_tape_state(saved_tape)
            if cap.eval_context is not None:
                cap.eval_context.__exit__(None, None, None)
        return cap.finish(out)

    try:
        # The ranks' axis is bound, so per-rank collectives in the region trace as collectives.
        closed = jax.make_jaxpr(region, axis_env=[(dist.RANK_AXIS, dist.get_world_size())])(
            *call.arrays)
        program = build_program(cap, closed, call, capture_as_const, _owner(fn))
        failed = False
    finally:
        hooks.set_tape_state(saved_tape)
        cap.restore(failed)
    program.seconds = time.perf_counter() - start
    program.epoch = epoch
    return program


def _owner(fn: Callable) -> list:
    """The Module a region is the forward of (`partial_trace(module)`, a bound method of a
    module): its state counts as an argument's, never baked in by `capture_as_const`."""
    owner = getattr(fn, "__self__", fn)
    return [owner] if isinstance(owner, M.Module) else []


def _run(cap: Capture, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """Run the region; once it was handed over to the lazy engine, finish the call there."""
    try:
        out = fn(*args, **kwargs)
    except BaseException:
        if cap.lazy is not None:
            cap.lazy.abandon()
        raise
    if cap.lazy is None:
        return out
    try:
        cap.lazy.flush("end of the region", None)
    except BaseException:
        cap.lazy.abandon()
        raise
    cap.lazy.saved.clear()
    raise HandedOver(out, cap.lazy.report)
