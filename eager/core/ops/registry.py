"""The op registry: every op is one definition, `defop(...)`, registered here once.

An op's definition carries everything about it: its pure jax function, its autocast rule
(`amp`), the explanation of bad arguments after a failed call (`check`) and the check a
functional wrapper runs before the call (`before`), as jax keeps a primitive's rules with the
primitive. No table elsewhere is keyed by op name, so nothing can drift from the registry.

An `Op` caches, per set of static attributes, the jitted forward and the jitted vjp of that same
forward (the backward rule). Nothing on the eager hot path traces anew once a cache entry exists.
"""

from __future__ import annotations

import functools as ft
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import jax

from xla_segments import base_compile_options, compile_threads, quick_compile_options

from ..context import current
from . import persistent
from .checks import Check, Found

OPS: dict[str, Op] = {}


class Op:
    """A primitive: `fwd(*arrays, **attrs)` is a pure jax function.

    Args:
        name: registry key, unique.
        fwd: the forward, over jax arrays (and Python scalars) plus static keyword attributes.
        differentiable: False for ops whose outputs never carry a gradient (comparisons, argmax,
            random draws, optimizer updates).
        nondiff_outputs: indices of outputs that never carry a gradient (BatchNorm's new running
            statistics); they get a zero cotangent.
        multi_output: the forward returns a tuple of arrays.
        donate: `donate(**attrs) -> input positions` whose buffers a call may consume (the
            outputs replace them: optimizer updates); the dispatcher copies any that something
            else still references, so donation never destroys a value in use.
        compiler_options: `compiler_options(**attrs) -> dict` of XLA options for the jitted
            forward and backward of a call with these attributes (None: XLA's defaults).
        ragged: how the op runs on tensors with a ragged axis 0 (`eager/core/ragged.py`): "rows"
            (row-independent: on the padded storage), "masked" (a reduction over axis 0 whose
            second input is a validity mask), "loss" (a loss with a `reduction`), a function
            `(attrs, ndim) -> one of those or None`, or None: on the exact arrays.
        resizes: its output's storage is sized from a length read on the host, not from its
            inputs' storages (a ragged concatenation takes the ladder's rung for the summed
            length). A region with graph breaks runs it in a stretch of its own, so that the
            ops after it compile once per output size rather than once per combination of
            its inputs' sizes, as they do in eager code.
        amp: its rule inside `eager.amp.autocast` (`eager/core/amp_policy.py`): `LOW` (the
            matmul class: floating inputs cast to the low precision type), `FLOAT32`
            (accumulations: low precision inputs cast to float32) or None (as given).
        check: `(inputs, attrs) -> Found`, the specific explanation of bad arguments that the
            dispatcher asks for only after the op failed (`Op.explain`), where jax's own reason
            would confuse.
        before: `(inputs, attrs) -> Found`, the check a functional wrapper runs before the call
            (`op_errors.require`): the op's rules for its tensor arguments and its attributes'
            ranges, so that it refuses what jax would take silently (an integer convolution),
            refuse only when compiling or refuse obscurely, whichever wrapper calls it (often
            also its `check`). Its inputs are those the wrapper passes to `require`, which may
            be fewer than the op takes (`conv`'s reads no bias).
        quick: a small program that runs cheaply (an elementwise map, an optimizer update):
            compiled with `xla_segments.quick_compile_options()`, which cut
            its compile time without changing its results or its speed.
    """

    __slots__ = ("name", "fwd", "differentiable", "nondiff_outputs", "multi_output", "_impl",
                 "_fwd", "_bwd", "donate", "derived", "compiler_options", "ragged",
                 "ragged_ops", "persist", "resizes", "quick", "amp", "check", "before")

    def __init__(
        self,
        name: str,
        fwd: Callable[..., Any],
        *,
        differentiable: bool = True,
        nondiff_outputs: tuple[int, ...] = (),
        multi_output: bool = False,
        donate: Callable[..., tuple[int, ...]] | None = None,
        compiler_options: Callable[..., dict] | None = None,
        ragged: str | Callable[[dict, int], str | None] | None = None,
        resizes: bool = False,
        quick: bool = False,
        amp: str | None = None,
        check: Check | None = None,
        before: Check | None = None,
    ):
        self.name = name
        self.fwd = fwd
        self.differentiable = differentiable
        self.nondiff_outputs = nondiff_outputs
        self.multi_output = multi_output or bool(nondiff_outputs)
        self._impl = _cut_gradients(fwd, differentiable, nondiff_outputs)
        self._fwd: dict[tuple, Callable] = {}
        self._bwd: dict[tuple, Callable] = {}
        self.donate = donate
        self.derived: dict[tuple, Op] = {}  # its vjp as an op, for higher-order gradients
        self.compiler_options = compiler_options
        self.ragged = ragged
        self.resizes = resizes
        self.quick = quick
        self.amp = amp
        self.check = check
        self.before = before
        self.ragged_ops: dict[str, Op] = {}  # its variants on ragged storage (eager/core/ragged.py)
        # what names its programs in the on-disk cache (`persistent.py`); None: not kept there
        self.persist: tuple | None = None

    per_rank = False  # a collective over the ranks of the process group (eager.distributed)

    def __repr__(self) -> str:
        return f"Op({self.name})"

    def explain(self, inputs: Sequence, attrs: dict) -> Found:
        """The problem the op's `check` finds with `inputs` and `attrs`, or None."""
        return _run_check(self.check, inputs, attrs)

    def check_before(self, inputs: Sequence, attrs: dict) -> Found:
        """The problem the op's `before` check finds ahead of a call, or None."""
        return _run_check(self.before, inputs, attrs)

    def jitted(self, key: tuple) -> Callable:
        """The jitted forward for the static attributes `key` (a tuple of (name, value)); for
        ops that donate, it consumes the buffers at `donated(key)`."""
        fn = self._fwd.get(key)
        if fn is None:
            fn = self._fwd[key] = self._jit(ft.partial(self._impl, **dict(key)), key, ("fwd",),
                                            self.donated(key))
        return fn

    def drop_compiled(self) -> None:
        """Forget the jitted forwards and backwards, which hold the XLA options they were
        built with: the next call builds them anew (a changed `compiler_options` setting)."""
        self._fwd.clear()
        self._bwd.clear()

    def _jit(self, fn: Callable, key: tuple, variant: tuple,
             donate: tuple[int, ...] = ()) -> Callable:
        """`jax.jit(fn)`, with the op's compiler options for calls outside any trace, and its
        executables kept on disk when jax's persistent cache is on (`persistent.py`)."""
        options = self.options(key)
        if self.persist is not None:
            kept = persistent.wrap(fn, (*self.persist, *variant), key, options, donate)
            if kept is not None:
                return kept
        plain = jax.jit(fn, donate_argnums=donate)
        if options is None:
            return plain
        return _Tuned(jax.jit(fn, donate_argnums=donate, compiler_options=options), plain)

    def options(self, key: tuple) -> dict | None:
        """The XLA compiler options of calls with attributes `key` (None: the defaults)."""
        own = {} if self.compiler_options is None else self.compiler_options(**dict(key)) or {}
        options = {**(quick_compile_options() if self.quick else base_compile_options()), **own}
        return options or None

    def donated(self, key: tuple) -> tuple[int, ...]:
        """The input positions a call with attributes `key` donates (none for most ops)."""
        return () if self.donate is None else self.donate(**dict(key))

    def vjp(self, key: tuple, mask: tuple[int, ...]) -> Callable:
        """The jitted backward: `(primals, cotangents) -> grads of the inputs at positions mask`.

        It is `jax.vjp` of the forward itself, so eager and compiled gradients agree by
        construction; XLA drops the forward work that the cotangents do not need.
        """
        fn = self._bwd.get((key, mask))
        if fn is None:
            fn = self._bwd[(key, mask)] = self._jit(make_vjp(self, dict(key), mask), key,
                                                    ("vjp", mask))
        return fn


def _run_check(check: Check | None, inputs: Sequence, attrs: dict) -> Found:
    """What `check` finds, or None: no check, or arguments too odd for it to explain (the
    generic message then says what is wrong)."""
    if check is None:
        return None
    try:
        return check(inputs, attrs)
    except Exception:  # noqa: BLE001  (any failure of the check: nothing specific to say)
        return None


class _Tuned:
    """An op's jit compiled with its XLA options, and the same jit without them for calls in a
    trace (a capture, a compiled segment replaying ops, `jax.eval_shape`): jax refuses options
    on a jit nested in a trace, where the enclosing executable's options apply anyway."""

    __slots__ = ("tuned", "plain", "__weakref__")  # the lazy engine holds jits weakly

    def __init__(self, tuned: Callable, plain: Callable):
        self.tuned, self.plain = tuned, plain

    def _cache_size(self) -> int:  # as a jitted function reports it (compiled specializations)
        # a method of jax's jitted functions that `jax.stages.Wrapped` leaves out
        return self.tuned._cache_size() + self.plain._cache_size()  # type: ignore[attr-defined]

    def __call__(self, *args: Any) -> Any:
        # a capture may call an op on concrete arrays that it lifts into the trace later
        if current() is not None or _holds_tracer(args):
            return self.plain(*args)
        return self.tuned(*args)


def _holds_tracer(args: tuple) -> bool:
    """Whether a tracer is among `args`: flat for a forward's arrays (every eager op call),
    walked as a tree only for the containers a backward takes (primals, cotangents)."""
    for a in args:
        if isinstance(a, jax.core.Tracer):
            return True
        if isinstance(a, (tuple, list, dict)) and any(
                isinstance(b, jax.core.Tracer) for b in jax.tree.leaves(a)):
            return True
    return False


def start_vjp(recorded: tuple, out_avals: Sequence[tuple]) -> None:
    """Start compiling (or reading from disk) the backward program of a call being recorded,
    on the compile pool, so that the backward pass finds it ready: until then the step's
    forward goes on beside the compile. `recorded` is what the tape node keeps of the call,
    `(op, attrs key, differentiated positions, input arrays)`, and `out_avals` its outputs'
    `(shape, dtype)` (the cotangents' avals). Only for a program kept on disk (`persistent`,
    which can take a program compiled elsewhere), and only with more than one compile
    thread (`PARTIAL_COMPILE_THREADS=1`: compiled where it is called, as before)."""
    op, key, mask, primals = recorded
    fn = op._bwd.get((key, mask)) if isinstance(op, Op) else None  # as `Op.vjp` made it
    if _prefetches(fn):
        cotangents = tuple(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in out_avals)
        fn.prefetch(primals, cotangents)


def prefetch(op: Op, key: tuple, args: Sequence) -> None:
    """Start getting the forward program that a later call of `op` with attributes `key` on
    arguments like `args` will run (arrays, `jax.ShapeDtypeStruct`s for arrays not made yet,
    scalars), on the compile pool: read from disk, or compiled beside what the caller does
    until then. As `start_vjp`: only for a program kept on disk and with a compile pool; a
    call that comes with other arguments compiles its own, as ever."""
    fn = op.jitted(key)
    if _prefetches(fn):
        fn.prefetch(*args)


def _prefetches(fn: Any) -> TypeGuard[persistent.Persistent]:
    """Whether the jitted `fn` takes a program started ahead: one kept on disk, with a compile
    pool, and only until its first program is in use (a cheap test first: the hot path of a
    recorded op asks)."""
    return type(fn) is persistent.Persistent and not fn.loaded and compile_threads() > 1


def make_vjp(op: Op, attrs: dict, mask: tuple[int, ...]) -> Callable:
    """`(primals, cotangents) -> gradients of the inputs at `mask``, from `jax.vjp` of `op`."""
    def bwd(primals: tuple, cts: tuple) -> tuple:
        def f(*diff):
            args = list(primals)
            for i, v in zip(mask, diff):
                args[i] = v
            return op._impl(*args, **attrs)

        _, pullback = jax.vjp(f, *(primals[i] for i in mask))
        return pullback(cts if op.multi_output else cts[0])

    return bwd


def _cut_gradients(fwd: Callable, differentiable: bool,
                   nondiff_outputs: tuple[int, ...]) -> Callable:
    """`fwd` with `stop_gradient` on the outputs that carry no gradient, so that differentiating
    a traced program as a whole (a compiled segment) agrees with the eager tape. XLA drops the
    `stop_gradient`s, so eager calls pay nothing for them."""
    if differentiable and not nondiff_outputs:
        return fwd

    @ft.wraps(fwd)
    def impl(*args: Any, **attrs: Any) -> Any:
        out = fwd(*args, **attrs)
        if not differentiable:
            return jax.tree.map(jax.lax.stop_gradient, out)
        return tuple(jax.lax.stop_gradient(o) if i in nondiff_outputs else o
                     for i, o in enumerate(out))

    return impl


def defop(name: str, *, cls: type[Op] = Op, **options: Any) -> Callable[[Callable], Op]:
    """Register the decorated pure jax function as op `name` and return its `Op` (an instance
    of `cls`: a subclass runs the same function differently, as collectives do).

    For example, `defop("twice")(lambda x: x * 2)` registers an op that
    `eager.apply(OPS["twice"], t)` runs on a Tensor `t`, with its gradient from `jax.vjp`;
    `defop("conv", amp=LOW, check=..., before=...)` also gives it its autocast rule and its
    argument checks (`Op`'s docstring lists every option).
    """

    def register(fwd: Callable) -> Op:
        if name in OPS:
            raise ValueError(f"op {name!r} is registered twice")
        op = OPS[name] = cls(name, fwd, **options)
        return op

    return register
