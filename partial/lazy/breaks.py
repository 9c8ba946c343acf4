"""The runner of a function with graph breaks (see `run.py` for how a call is recorded)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import jax

import eager as eg
from eager.hooks import short_path

from ..compiled import refuse_outer_gradients
from ..messages import warn_recompile
from ..region import CacheInfo, flatten_call
from ..settings import Settings
from .run import LazyRun
from .stretch import Piece, Stretch, compile_stretch

hooks = eg.hooks


class Breaks:
    """The runner of a function with graph breaks: every call runs its Python with ops
    recorded lazily (`lazy.LazyRun`), each stretch between breaks a cached compiled piece;
    and the last call's story, for `explain()`."""

    def __init__(self, name: str, settings: Settings, cache: Any, first_break: str):
        self.name, self.cache = name, cache
        self.kind, self.differentiable = settings.kind, settings.differentiable
        self.recompile_limit = settings.recompile_limit
        self.graph_breaks = settings.graph_breaks
        self.remat = settings.remat
        self.shapes: dict = {}  # (op, attrs, input avals) -> output avals
        self.compiled_at: Counter = Counter()  # stretch start -> sequences compiled
        self.last: list = []  # per stretch of the last call: (ops, why it ended, where, how)
        self.first_break = first_break  # why the function runs with breaks, for explain()

    def call(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        """Call `fn` lazily; return what it returns, every tensor holding its value."""
        call = flatten_call(args, kwargs)
        if not self.differentiable and hooks.is_recording():
            refuse_outer_gradients(call.tensors)
        # Python floats become the 0-d Tensors the first call's capture saw, so the region's
        # Python and the pieces' keys (placement included) are those of that call.
        args, kwargs = call.arguments(args, kwargs)
        run = LazyRun(self)
        try:
            with hooks.capturing(run):
                out = fn(*args, **kwargs)
                run.flush("end of the region", None)
        except BaseException:
            run.abandon()
            raise
        run.saved.clear()
        self.last = run.report
        return out

    def output_avals(self, op: Any, attrs: tuple, avals: tuple) -> list:
        key = (op, attrs, avals)
        out = self.shapes.get(key)
        if out is None:
            structs = [None if a is None else jax.ShapeDtypeStruct(
                a.shape, a.dtype, weak_type=a.weak_type) for a in avals]
            result = jax.eval_shape(op.jitted(attrs), *structs)
            leaves = result if op.multi_output else (result,)
            out = self.shapes[key] = [jax.core.ShapedArray(r.shape, r.dtype,
                                                           weak_type=r.weak_type)
                                      for r in leaves]
        return out

    def piece(self, st: Stretch, outputs: tuple, ordinal: int) -> tuple[Piece, bool]:
        """The compiled piece for the stretch `st` with `outputs`, and whether it was cached."""
        cache = self.cache
        # (compiled with or without the convolution rewrites: a switch compiles anew)
        key = (tuple(st.records), tuple(st.specs), outputs, eg.conv_rewrites())
        piece = cache.piece(key)
        if piece is not None:
            return piece, True
        site = (ordinal, st.site)
        self.compiled_at[site] += 1
        if self.compiled_at[site] > self.recompile_limit:
            why, filename, line = st.site
            start = f"{why} at {short_path(filename)}:{line}" if filename else why
            warn_recompile(
                self.kind, f"segment {ordinal + 1} of `{self.name}` (starting at {start})",
                self.compiled_at[site], self.recompile_limit, "the ops it records, their input "
                "shapes or dtypes, or the tensors alive at its end differ from every cached "
                "one", "Keep shapes fixed, or raise recompile_limit.")
        piece = compile_stretch(st, outputs, f"{self.name}_part{ordinal + 1}",
                                remat=self.remat)
        cache.add_piece(key, piece)
        return piece, False


    def info(self) -> CacheInfo:
        last = self.last
        return self.cache.info(sum(1 for n, *_ in last if n),
                               tuple(describe_break(why, where) for _, why, where, _ in last
                                     if where is not None or why != "end of the region"),
                               sum(n for n, *_ in last))

    def describe(self, head: str) -> list[str]:
        """How the last call ran, in lines, for `explain()`."""
        last = self.last
        lines = [f"{head} has graph breaks ({self.first_break}): it re-runs its Python on every "
                 "call"]
        ran = sum(1 for n, *_ in last if n)
        lines.append(f"the last call ran {ran} segment{'s' * (ran != 1)}:")
        k = 0
        for n, why, where, how in last:
            then = "the " + why if where is None else describe_break(why, where)
            if n:
                k += 1
                lines.append(f"  {k}. {n} op{'s' * (n != 1)} ({how}), then {then}")
            else:
                lines.append(f"     no ops, then {then}")
        return lines

    def flat_inputs(self, args: tuple, kwargs: dict) -> list:
        raise LookupError(f"{self.kind} `{self.name}` has graph breaks: each call runs several "
                          "segments, whose inputs depend on the call")


def describe_break(why: str, where: Any) -> str:
    if where is None:
        return why
    return f"{why} at {short_path(where[0])}:{where[1]}"
