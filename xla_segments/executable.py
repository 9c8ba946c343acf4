"""One executable: how it is lowered, compiled (here or on the compile pool) and described.

`Executable` is what a `Segment` hands out (call it; ask XLA's cost and memory analyses and its
HLO); `Store` is where a segment keeps its executables between processes. `_Lowering` holds a
program traced and lowered in the caller's thread (where a user's error must surface), whose XLA
compile may then run on the pool (`_compile_later`, `compile_pool.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jax

from . import compile_pool, segment_store
from .layout import has_convolution
from .options import CompileOptions


class Store(Protocol):
    """Where a segment's executables are kept between processes, by a text that describes
    the executable fully (the kind, the gradient signature, the abstract inputs and the
    options; the store adds the description of the function it was made for).

    `tag` ends the compiled functions' names (so jax's own persistent cache, which keys a
    program by its text, names included, tells apart what two versions of the store's world
    compiled: a store can only keep an executable compiled anew, not one jax loaded)."""

    tag: str

    def load(self, text: str) -> tuple[Any, dict] | None:
        """The `jax.stages.Compiled` kept for `text` and its XLA options, or None."""

    def save(self, text: str, compiled: Any, xla_options: dict) -> None:
        """Keep `compiled` (built with `xla_options`) for `text`; a store may decline.

    A store may also have `load_later(text)`: None when nothing is kept for `text`, else a
    function that waits for the executable being read on another thread and returns what
    `load` would (a backward is then read while the step runs on to it)."""


@dataclass
class Executable:
    """One compiled executable and what it cost to build.

    `compiled` is the `jax.stages.Compiled` (call it directly on the hot path); `lowered` gives
    the StableHLO (lowered again on demand for one a store supplied); `seconds` is the time
    spent tracing, lowering and compiling, or loading; `compiler_options` the XLA options it
    was compiled with.
    """

    kind: str
    compiled: Any  # a `jax.stages.Compiled`, or a per-rank call of one (`_local`)
    _lowered: jax.stages.Lowered | Callable[[], jax.stages.Lowered]
    seconds: float
    compiler_options: dict = field(default_factory=dict)

    @property
    def lowered(self) -> jax.stages.Lowered:
        if callable(self._lowered):  # loaded from a store: lowered only when asked
            self._lowered = self._lowered()
        return self._lowered

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)

    def cost_analysis(self) -> Any:
        """XLA's cost estimate (flops, bytes accessed, ...) for this executable."""
        return self.compiled.cost_analysis()

    def memory_analysis(self) -> Any:
        """XLA's memory estimate (argument, output, temporary and generated-code sizes)."""
        return self.compiled.memory_analysis()

    def as_text(self, optimized: bool = False) -> str:
        """The StableHLO module (or, with `optimized`, the HLO after XLA's passes)."""
        return self.compiled.as_text() if optimized else self.lowered.as_text()


@dataclass
class _Lowering:
    """An executable traced and lowered, not compiled yet, and what that took."""

    kind: str
    lowered: jax.stages.Lowered
    xla_options: dict
    seconds: float

    def compile(self) -> Any:
        """The `jax.stages.Compiled`, compiled now in this thread."""
        # None, not {}, when there are none: exactly the call made before options existed.
        with compile_pool.needed_now():
            return self.lowered.compile(compiler_options=self.xla_options or None)

    def executable(self) -> Executable:
        """The `Executable`, compiled now in this thread."""
        start = time.perf_counter()
        compiled = self.compile()
        return Executable(self.kind, compiled, self.lowered,
                          self.seconds + time.perf_counter() - start, self.xla_options)


def _lower(kind: str, fn: Callable, avals: Sequence[Any], options: CompileOptions,
           jit_args: dict[str, Any] | None = None) -> _Lowering:
    """`fn` traced and lowered for `avals` (in this thread: a trace error surfaces here), with
    the XLA options `options` give its kind."""
    start = time.perf_counter()
    traced = jax.jit(fn, **(jit_args or {})).trace(*avals)
    lowered = traced.lower()
    xla_options = options.for_kind(kind, convolves=bool(options.conv_options)
                                   and has_convolution(traced.jaxpr))
    return _Lowering(kind, lowered, xla_options, time.perf_counter() - start)


def _compile(kind: str, fn: Callable, avals: Sequence[Any], options: CompileOptions,
             jit_args: dict[str, Any] | None = None) -> Executable:
    return _lower(kind, fn, avals, options, jit_args).executable()


def _placed(low: _Lowering, where: Any) -> Any:
    """The lowered training forward's outputs and residuals as avals placed where the forward
    puts them: per its compiled executable's `output_shardings`, or all on one device."""
    infos = low.lowered.out_info
    if isinstance(where, jax.Device):
        shardings = jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(where), infos)
    else:
        shardings = where.output_shardings
    return jax.tree.map(
        lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding),
        infos, shardings)


def _compile_later(low: _Lowering, keep: Callable[[Any], None], retry: Callable[[], Any],
                   valid: Callable[[], bool] | None = None, ahead: bool = False
                   ) -> tuple[Executable, compile_pool.Task]:
    """The `Executable` of `low`, compiled on the compile pool and kept (`keep(compiled)`) by
    the thread that compiled it, and that compile's task. Its `compiled` waits for it at
    the first call; `retry()` compiles it in the calling thread after a failed compile, or
    when `valid()`, asked at the first call, says the one compiled will not do."""
    exe = Executable(low.kind, None, low.lowered, low.seconds, low.xla_options)
    context = _context()

    def job() -> Any:
        start = time.perf_counter()
        compiled = low.compile()
        exe.seconds += time.perf_counter() - start
        if context is not None and _context() == context:  # a store keys it by the caller's
            keep(compiled)
        return compiled

    done = compile_pool.Task(job, ahead)
    exe.compiled = compile_pool.Compiling(done, retry, valid)
    return exe, done


def _context() -> Any:
    """jax's settings that shape a trace in this thread (x64, matmul precision, ...) as
    `SegmentStore` keys an executable by them (values, and the type of anything else), or None
    in a jax that does not say: they are per thread, so a pool thread may have others."""
    if segment_store._trace_context is None:
        return None
    return segment_store.settings_key()
