"""`Segment`: a pure function over arrays, compiled ahead of time for fixed abstract inputs.

A segment owns up to three kinds of executables, each compiled once, on first use:

- the inference forward, `(*inputs) -> outputs`;
- per gradient signature (which inputs to differentiate, which outputs carry a gradient), the
  training forward `(*inputs) -> (outputs, residuals)` and the backward
  `(residuals, cotangents) -> input gradients`, both from `jax.vjp` of the same function, so the
  residuals are exactly what jax decides the backward needs (or, with `remat`, what the
  `jax.checkpoint` policy lets it keep).

How they are compiled (donation, shardings, XLA options, rematerialization) is one
`CompileOptions` value. A caller that can describe `fn` without tracing it gives a `store`
(`Store`): each executable is then looked up there before anything is traced, and kept there
once built. Nothing here knows about Tensors: callers pass arrays and get arrays back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax

from . import compile_pool, per_rank
from .deferred import Deferred
from .executable import (  # noqa: F401 - _context: the pool's settings check, tested here
    Executable,
    Store,
    _compile,
    _compile_later,
    _context,
    _lower,
    _Lowering,
    _placed,
)
from .layout import channels_last
from .options import CompileOptions
from .residuals import slim


@dataclass
class Segment:
    """A pure function `fn(*inputs) -> tuple of outputs` for inputs shaped like `in_avals`.

    Args:
        fn: a pure jax function of positional arrays returning a tuple (or list) of arrays.
        in_avals: one `jax.ShapeDtypeStruct` (or array) per input; a sharding on it places
            the executables' inputs (and so the computation).
        name: used in the names of the compiled executables and in error messages.
        options: how to compile (`CompileOptions`): donation and shardings of the inference
            forward, XLA options, rematerialization of the training forward.
        store: where executables are looked up before tracing and kept after compiling
            (`Store`), or None. Not used by a per-rank segment.

    >>> import jax.numpy as jnp
    >>> seg = Segment(lambda x, w: (jnp.tanh(x @ w),), [jnp.ones((2, 3)), jnp.ones((3, 4))])
    >>> seg.forward()(jnp.ones((2, 3)), jnp.zeros((3, 4)))[0].shape
    (2, 4)
    >>> fwd, bwd = seg.vjp(wrt=(1,), diff_outputs=(0,))
    >>> outs, res = fwd(jnp.ones((2, 3)), jnp.zeros((3, 4)))
    >>> bwd(res, (jnp.ones((2, 4)),))[0].shape
    (3, 4)
    >>> deep = Segment(lambda x, w: (jnp.sin(jnp.sin(jnp.sin(x @ w))),),
    ...                [jnp.ones((8, 3)), jnp.ones((3, 4))])
    >>> Segment(deep.fn, deep.in_avals, options=CompileOptions(remat=True)).residual_bytes(
    ...     wrt=(1,), diff_outputs=(0,)) < deep.residual_bytes(wrt=(1,), diff_outputs=(0,))
    True
    """

    fn: Callable[..., Sequence[Any]]
    in_avals: Sequence[Any]
    name: str = "segment"
    options: CompileOptions = CompileOptions()
    store: Store | None = None
    _avals: tuple = field(init=False, repr=False)
    _forward: Executable | None = field(default=None, init=False, repr=False)
    _vjps: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._avals = tuple(abstract(a) for a in self.in_avals)
        _check_options(self.options, len(self._avals), self.name)
        self._fn = self.fn
        # Rewritten on first use (it traces `fn` once); a per-rank function keeps its layout.
        self._relayout = self.options.layout == "channels_last" and self.options.per_rank is None
        pr = self.options.per_rank
        if pr is not None:  # compiled over global arrays, called with local ones
            self._scalar_in = [len(a.shape) == 0 for a in self._avals]
            self._scalar_out: list[bool] = []
            self._fn = pr.spmd(self.fn, self._avals, self._scalar_out)
            self._avals = tuple(pr.global_aval(a) for a in self._avals)

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

    def _function(self) -> Callable:
        """The function the executables compile: `fn`, in the layout `options.layout` asks."""
        if self._relayout:
            self._fn = channels_last(self._fn, self._avals)
            self._relayout = False
        return self._fn

    def forward(self) -> Executable:
        """The inference forward: `(*inputs) -> tuple of outputs`; no residuals are kept."""
        if self._forward is None:
            text = self._text("forward")
            self._forward = self._load("forward", text, lambda: self._build_forward().lowered)
            if self._forward is None:
                forward = self._forward = self._build_forward()
                self._keep(text, forward.compiled, forward.compiler_options)
        return self._forward

    def _build_forward(self) -> Executable:
        fn = self._function()

        def forward(*inputs: Any) -> tuple:
            return tuple(fn(*inputs))

        forward.__name__ = f"{self.name}_forward{self._tag}"
        opts = self.options
        jit_args: dict[str, Any] = {"donate_argnums": opts.donate}
        if opts.in_shardings is not None:
            jit_args["in_shardings"] = opts.in_shardings
        if opts.out_shardings is not None:
            jit_args["out_shardings"] = opts.out_shardings
        return self._local(_compile("forward", forward, self._avals, opts, jit_args))

    @property
    def _tag(self) -> str:
        return "" if self.store is None else self.store.tag

    def _text(self, kind: str, signature: tuple = ()) -> str | None:
        """What `store` keeps the executable of `kind` under, besides the function; None when
        there is no store (or the segment is per rank: its executables wrap global ones)."""
        if self.store is None or self.options.per_rank is not None:
            return None
        return repr((kind, signature, self._avals, self.options))

    def _load(self, kind: str, text: str | None, lower: Callable) -> Executable | None:
        """The executable `store` kept for `text`, or None. `lower` lowers it if asked."""
        if text is None:
            return None
        start = time.perf_counter()
        found = self.store.load(text) if self.store is not None else None
        if found is None:
            return None
        compiled, xla_options = found
        return Executable(kind, compiled, lower, time.perf_counter() - start, xla_options)

    def _load_later(self, key: tuple, text: str | None) -> Executable | None:
        """The backward for `key` as `_load` gives it, read on another thread where the store
        can (`deferred.py`): the step goes on to it meanwhile."""
        later = getattr(self.store, "load_later", None)
        if text is None or later is None:
            return self._load("backward", text, lambda: self._lower_vjp(key)[1].lowered)
        wait = later(text)
        if wait is None:
            return None
        exe = Executable("backward", None, lambda: self._lower_vjp(key)[1].lowered, 0.0)
        exe.compiled = Deferred(exe, wait, lambda: self._lower_vjp(key)[1].compile())
        return exe

    def _keep(self, text: str | None, compiled: Any, xla_options: dict) -> None:
        if text is not None and self.store is not None:
            self.store.save(text, compiled, xla_options)

    def vjp(self, wrt: tuple[int, ...],
            diff_outputs: tuple[int, ...]) -> tuple[Executable, Executable]:
        """The training forward and the backward for differentiating the inputs `wrt` through
        the outputs `diff_outputs`.

        `forward(*inputs) -> (outputs, residuals)` returns every output; `backward(residuals,
        cotangents) -> gradients` takes one cotangent per entry of `diff_outputs` and returns one
        gradient per entry of `wrt`. Outputs outside `diff_outputs` are treated as constants.
        The function is differentiated under `options.remat`'s `jax.checkpoint` policy, if any.

        Both are traced and lowered here; with a compile pool (`compile_pool.py`) they then
        compile there at once, each awaited at its first call (the backward's compile goes on
        while the step runs on to its loss).
        """
        key = (tuple(wrt), tuple(diff_outputs))
        pair = self._vjps.get(key)
        if pair is None:
            texts = self._text("forward_vjp", key), self._text("backward", key)
            forward = self._load("forward_vjp", texts[0], lambda: self._lower_vjp(key)[0].lowered)
            backward = self._load_later(key, texts[1])  # (a miss is noted, to keep it later)
            if forward is not None and backward is not None:
                pair = self._vjps[key] = (forward, backward)
            else:
                pair = self._vjps[key] = self._build_vjp(key, texts)
        return pair

    def _vjp_functions(self, key: tuple) -> tuple[Callable, Callable]:
        """The training forward for `key` (wrt, diff_outputs), `(*inputs) -> (outputs,
        residuals)`, and `rebuild(residuals)`, the pullback it keeps the residuals of."""
        fwd = _vjp_forward(_rematerialized(self._function(), self.options), *key)
        fwd, rebuild = slim(fwd, self._avals, key[1])
        fwd.__name__ = f"{self.name}_forward_vjp{self._tag}"
        return fwd, rebuild

    def _lower_backward(self, key: tuple, rebuild: Callable, placed: Any) -> _Lowering:
        """The backward for `key` lowered for the training forward's outputs and residuals
        `placed` (avals with the placements the forward gives them)."""
        out_info, res = placed
        cts = tuple(out_info[j] for j in key[1])
        layouts = (None,) * len(key[0]) if self.options.per_rank else tuple(
            _spread(self._avals[i]) for i in key[0])

        def backward(residuals: Any, cotangents: tuple) -> tuple:
            grads = rebuild(residuals)(cotangents)
            return tuple(g if s is None else jax.lax.with_sharding_constraint(g, s)
                         for g, s in zip(grads, layouts))

        backward.__name__ = f"{self.name}_backward{self._tag}"
        return _lower("backward", backward, (res, cts), self.options)

    def _lower_vjp(self, key: tuple) -> tuple[_Lowering, _Lowering]:
        """Both executables for `key` lowered, not compiled (the backward for the forward's
        outputs where they would land): what `Executable.lowered` shows of a loaded pair, and
        what a backward that could not be read compiles."""
        fwd, rebuild = self._vjp_functions(key)
        fwd_low = _lower("forward_vjp", fwd, self._avals, self.options)
        device = self._device()
        if device is None:
            compiled = fwd_low.compile()
            return fwd_low, self._lower_backward(key, rebuild, _placed(fwd_low, compiled))
        return fwd_low, self._lower_backward(key, rebuild, _placed(fwd_low, device))

    def _build_vjp(self, key: tuple, texts: tuple = (None, None)
                   ) -> tuple[Executable, Executable]:
        """The training forward and the backward for `key` (wrt, diff_outputs), traced and
        compiled, and kept under `texts`. Serially, the backward is lowered for where the
        compiled forward puts its outputs; on a compile pool (`_compile_both`) for where they
        will be, the forward's compile going on meanwhile."""
        fwd, rebuild = self._vjp_functions(key)
        fwd_low = _lower("forward_vjp", fwd, self._avals, self.options)
        device = self._device() if compile_pool.parallel() else None
        if device is not None:
            return self._compile_both(key, texts, rebuild, fwd_low, device)
        fwd_exe = fwd_low.executable()
        bwd_exe = self._lower_backward(key, rebuild, _placed(fwd_low, fwd_exe.compiled)
                                       ).executable()
        pair = self._local(fwd_exe), self._local(bwd_exe, *key)
        for text, exe in zip(texts, pair):
            self._keep(text, exe.compiled, exe.compiler_options)
        return pair

    def _device(self) -> Any:
        """The one device the training forward runs on, or None: several (or a per-rank
        segment), or one that only its compile could tell (uncommitted inputs beside other
        devices). Its outputs land there, so the backward can be lowered before it compiled."""
        if self.options.per_rank is not None:
            return None
        shardings = {a.sharding for a in self._avals if a.sharding is not None}
        devices = {d for s in shardings for d in s.device_set}
        if not shardings:
            return jax.devices()[0] if jax.device_count() == 1 else None
        if len(devices) == 1 and all(isinstance(s, jax.sharding.SingleDeviceSharding)
                                     for s in shardings):
            return devices.pop()
        return None

    def _compile_both(self, key: tuple, texts: tuple, rebuild: Callable, fwd_low: _Lowering,
                      device: Any) -> tuple[Executable, Executable]:
        """`_build_vjp` on the compile pool: the forward compiles while the backward is lowered
        for outputs on `device`, then compiles beside it. Should the compiled forward put its
        outputs elsewhere after all, that backward is neither kept nor run: it is lowered
        and compiled again at its first use, for where they are."""
        predicted = _placed(fwd_low, device)
        fwd_exe, fwd_done = _compile_later(
            fwd_low, lambda c: self._keep(texts[0], c, fwd_low.xla_options), fwd_low.compile)
        bwd_low = self._lower_backward(key, rebuild, predicted)

        def as_predicted(forward: Any) -> bool:
            return _placed(fwd_low, forward) == predicted

        def keep(compiled: Any) -> None:  # (after the compile: waits for the forward's)
            if fwd_done.error() is None and as_predicted(fwd_done.result()):
                self._keep(texts[1], compiled, bwd_low.xla_options)

        def relowered() -> Any:
            return self._lower_backward(key, rebuild, _placed(fwd_low, fwd_exe.compiled)).compile()

        bwd_exe, _ = _compile_later(bwd_low, keep, relowered,
                                    valid=lambda: as_predicted(fwd_exe.compiled), ahead=True)
        return fwd_exe, bwd_exe

    def _local(self, exe: Executable, wrt: tuple = (), diff_outputs: tuple = ()) -> Executable:
        """`exe` as called on this rank's local arrays, for a per-rank segment."""
        pr = self.options.per_rank
        if pr is not None:
            exe.compiled = per_rank.wrap(exe.kind, exe.compiled, pr, self._scalar_in,
                                         self._scalar_out, wrt, diff_outputs)
        return exe

    def residual_bytes(self, wrt: tuple[int, ...], diff_outputs: tuple[int, ...]) -> int:
        """Bytes of the residuals the training forward for this gradient signature returns (what
        is held from forward to backward; `remat` trades it for recomputation). Builds the pair
        of executables if needed."""
        fwd, _ = self.vjp(wrt, diff_outputs)
        # a loaded executable knows its outputs; a per-rank call of one asks the lowering
        _, residuals = getattr(fwd.compiled, "out_info", None) or fwd.lowered.out_info
        return sum(math.prod(info.shape) * info.dtype.itemsize
                   for info in jax.tree.leaves(residuals))


def abstract(a: Any) -> jax.ShapeDtypeStruct:
    """Shape, dtype, weak type and, where known, placement (so executables run where their
    inputs live). An uncommitted array (`jnp.asarray(0.1)`) has no placement of its own: jax
    moves it to wherever the computation runs, as `jax.jit` does."""
    placed = getattr(a, "committed", True)
    return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False),
                                sharding=getattr(a, "sharding", None) if placed else None)


def _spread(aval: Any) -> Any:
    """The layout of an input laid out over several devices of a mesh (None otherwise): its
    gradient leaves the backward laid out the same, as FSDP keeps a split parameter's gradient
    split. Left to itself XLA may return them whole on every device (an all-reduce where a
    reduce-scatter would do; the GPT workload's backbone on 4 devices: 1.67 MiB of gradients
    out per device, 0.43 MiB pinned), and the eager optimizer then reads them whole."""
    sharding = getattr(aval, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding) and len(sharding.device_set) > 1:
        return sharding
    return None


def _check_options(options: Any, n_inputs: int, name: str) -> None:
    """What `CompileOptions` cannot check alone: that it fits this segment's inputs."""
    if not isinstance(options, CompileOptions):
        raise TypeError(f"Segment {name!r}: options must be a CompileOptions, "
                        f"got {type(options).__name__}")
    bad = [i for i in options.donate if i >= n_inputs]
    if bad:
        raise ValueError(f"Segment {name!r}: CompileOptions.donate has input indices {bad} "
                         f"but the segment has {n_inputs} inputs")
    if options.per_rank is not None and options.donate:
        raise ValueError(f"Segment {name!r}: a per-rank segment does not donate (its inputs "
                         f"are views of the ranks' own buffers); pass donate=()")
    if options.in_shardings is not None and len(options.in_shardings) != n_inputs:
        raise ValueError(f"Segment {name!r}: CompileOptions.in_shardings has "
                         f"{len(options.in_shardings)} entries for {n_inputs} inputs")


def _rematerialized(fn: Callable, options: CompileOptions) -> Callable:
    """`fn` under the `jax.checkpoint` policy of `options.remat` (itself when no remat)."""
    policy = options.remat_policy()
    if policy is None:
        return fn

    def segment_fn(*inputs: Any) -> tuple:
        return tuple(fn(*inputs))

    return jax.checkpoint(segment_fn, policy=policy)


def _vjp_forward(fn: Callable, wrt: tuple[int, ...], diff_outputs: tuple[int, ...]) -> Callable:
    def forward(*inputs: Any) -> tuple:
        def differentiable(*diff: Any) -> tuple[tuple, tuple]:
            args = list(inputs)
            for i, v in zip(wrt, diff):
                args[i] = v
            outs = tuple(fn(*args))
            return tuple(outs[j] for j in diff_outputs), outs

        _, pullback, outs = jax.vjp(differentiable, *(inputs[i] for i in wrt), has_aux=True)
        return outs, pullback

    return forward
