"""`Segment`: a pure function over arrays, compiled ahead of time for fixed abstract inputs.

A segment owns up to three kinds of executables, each compiled once, on first use:

- the inference forward, `(*inputs) -> outputs`;
- per gradient signature (which inputs to differentiate, which outputs carry a gradient), the
  training forward `(*inputs) -> (outputs, residuals)` and the backward
  `(residuals, cotangents) -> input gradients`, both from `jax.vjp` of the same function, so the
  residuals are exactly what jax decides the backward needs.

Nothing here knows about Tensors: callers pass arrays and get arrays back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax


@dataclass
class Executable:
    """One compiled executable and what it cost to build.

    `compiled` is the `jax.stages.Compiled` (call it directly on the hot path); `lowered` gives
    the StableHLO; `seconds` is the time spent tracing, lowering and compiling.
    """

    kind: str
    compiled: Any
    lowered: Any
    seconds: float

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
class Segment:
    """A pure function `fn(*inputs) -> tuple of outputs` for inputs shaped like `in_avals`.

    Args:
        fn: a pure jax function of positional arrays returning a tuple (or list) of arrays.
        in_avals: one `jax.ShapeDtypeStruct` (or array) per input; a sharding on it places
            the executables' inputs (and so the computation).
        name: used in the names of the compiled executables and in error messages.
        donate: indices of inputs the inference forward may donate (their buffers are consumed).

    >>> import jax.numpy as jnp
    >>> seg = Segment(lambda x, w: (jnp.tanh(x @ w),), [jnp.ones((2, 3)), jnp.ones((3, 4))])
    >>> seg.forward()(jnp.ones((2, 3)), jnp.zeros((3, 4)))[0].shape
    (2, 4)
    >>> fwd, bwd = seg.vjp(wrt=(1,), diff_outputs=(0,))
    >>> outs, res = fwd(jnp.ones((2, 3)), jnp.zeros((3, 4)))
    >>> bwd(res, (jnp.ones((2, 4)),))[0].shape
    (3, 4)
    """

    fn: Callable[..., Sequence[Any]]
    in_avals: Sequence[Any]
    name: str = "segment"
    donate: tuple[int, ...] = ()
    _avals: tuple = field(init=False, repr=False)
    _forward: Executable | None = field(default=None, init=False, repr=False)
    _vjps: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._avals = tuple(_abstract(a) for a in self.in_avals)

    @property
    def compile_seconds(self) -> float:
        """Total time spent building this segment's executables so far."""
        exes = [self._forward] if self._forward else []
        exes += [e for pair in self._vjps.values() for e in pair]
        return sum(e.seconds for e in exes)

    def executables(self) -> dict[str, Executable]:
        """Every executable built so far, by a readable name."""
        out = {"forward": self._forward} if self._forward else {}
        for (wrt, diff), (fwd, bwd) in self._vjps.items():
            out[f"forward_vjp wrt={wrt} outputs={diff}"] = fwd
            out[f"backward wrt={wrt} outputs={diff}"] = bwd
        return out

    def forward(self) -> Executable:
        """The inference forward: `(*inputs) -> tuple of outputs`; no residuals are kept."""
        if self._forward is None:
            fn = self.fn

            def forward(*inputs: Any) -> tuple:
                return tuple(fn(*inputs))

            forward.__name__ = f"{self.name}_forward"
            self._forward = _compile("forward", forward, self._avals, self.donate)
        return self._forward

    def vjp(self, wrt: tuple[int, ...],
            diff_outputs: tuple[int, ...]) -> tuple[Executable, Executable]:
        """The training forward and the backward for differentiating the inputs `wrt` through
        the outputs `diff_outputs`.

        `forward(*inputs) -> (outputs, residuals)` returns every output; `backward(residuals,
        cotangents) -> gradients` takes one cotangent per entry of `diff_outputs` and returns one
        gradient per entry of `wrt`. Outputs outside `diff_outputs` are treated as constants.
        """
        key = (tuple(wrt), tuple(diff_outputs))
        pair = self._vjps.get(key)
        if pair is None:
            fwd = _vjp_forward(self.fn, *key)
            fwd.__name__ = f"{self.name}_forward_vjp"
            fwd_exe = _compile("forward_vjp", fwd, self._avals, ())
            # Shapes from the lowering, placements from the executable (where outputs land).
            placed = jax.tree.map(
                lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype,
                                                            sharding=sharding),
                fwd_exe.lowered.out_info, fwd_exe.compiled.output_shardings)
            out_info, res = placed
            cts = tuple(out_info[j] for j in key[1])

            def backward(residuals: Any, cotangents: tuple) -> tuple:
                return tuple(residuals(cotangents))

            backward.__name__ = f"{self.name}_backward"
            bwd_exe = _compile("backward", backward, (res, cts), ())
            pair = self._vjps[key] = (fwd_exe, bwd_exe)
        return pair


def _abstract(a: Any) -> jax.ShapeDtypeStruct:
    """Shape, dtype, weak type and, where known, placement (so executables run where their
    inputs live)."""
    return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False),
                                sharding=getattr(a, "sharding", None))


def _vjp_forward(fn: Callable, wrt: tuple[int, ...], diff_outputs: tuple[int, ...]) -> Callable:
    def forward(*inputs: Any) -> tuple:
        def differentiable(*diff: Any) -> tuple:
            args = list(inputs)
            for i, v in zip(wrt, diff):
                args[i] = v
            outs = tuple(fn(*args))
            return tuple(outs[j] for j in diff_outputs), outs

        _, pullback, outs = jax.vjp(differentiable, *(inputs[i] for i in wrt), has_aux=True)
        return outs, pullback

    return forward


def _compile(kind: str, fn: Callable, avals: Sequence[Any],
             donate: tuple[int, ...]) -> Executable:
    start = time.perf_counter()
    lowered = jax.jit(fn, donate_argnums=donate).trace(*avals).lower()
    compiled = lowered.compile()
    return Executable(kind, compiled, lowered, time.perf_counter() - start)
