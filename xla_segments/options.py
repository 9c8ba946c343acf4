"""`CompileOptions`: how a `Segment` builds its executables (sharding, XLA:CPU convolution
options and layout, and `remat` all go through this one value).

One frozen, hashable value holds everything that changes the code XLA produces for a segment:
which inputs the inference forward may donate, its input and output shardings, XLA compiler
options (for every executable, and per kind of executable), and the rematerialization policy of
the training forward. Being hashable, it can be part of a cache key.
"""

from __future__ import annotations

import dataclasses
import functools as ft
import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax

from .per_rank import PerRank

#: The kinds of executables a `Segment` builds, as named in `executable_options`.
EXECUTABLE_KINDS = ("forward", "forward_vjp", "backward")

#: Accepted values of `CompileOptions.remat`.
REMAT_VALUES = (False, True, "dots")

#: Accepted values of `CompileOptions.layout`.
LAYOUTS = (None, "channels_last")

@ft.cache
def base_compile_options() -> dict:
    """XLA options for every executable this project compiles (segments, eager ops, the
    arrays eager fills), under any an op or a segment sets: on the CPU, LLVM at -O2 rather
    than XLA:CPU's -O3. Measured on 2 cores (jaxlib 0.10.2 and 0.12): the same bits from every
    program tried (a transformer block's training step, elementwise chains, a convolution's
    gradient, RetinaNet's and FCOS's steps), running as fast, compiled in 70-80% of the time;
    building RetinaNet in eager mode (hundreds of small programs) took 7 s instead of 14.
    Not set when the user's `XLA_FLAGS` chooses a level, nor on other backends."""
    if jax.default_backend() != "cpu" or _LEVEL in os.environ.get("XLA_FLAGS", ""):
        return {}
    return {_LEVEL: 2}


_LEVEL = "xla_backend_optimization_level"


@ft.cache
def quick_compile_options() -> dict:
    """XLA options for small programs that run cheaply (elementwise maps, optimizer updates):
    they cut the compile time without changing a result or slowing the program, where this
    jaxlib's XLA:CPU has them. On jaxlib 0.10, XLA:CPU's older emitters
    (`xla_cpu_use_fusion_emitters=False`) compiled an add in 41% and a relu or a sigmoid in
    about 70% of the CPU time, bit for bit the same, running as fast (60 ops checked with NaN,
    infinities and denormals); a transpose, pad, scatter or softmax ran slower, a convolution
    up to 25% slower, and a batch normalization's statistics came out one rounding apart, so
    those keep the defaults (RetinaNet in eager mode, every op so compiled: first step 16.2 ->
    12.4 s, later steps 1.37 -> 1.50 s). Whole segments so compiled ran as fast and compiled
    faster (RetinaNet with graph breaks, first step 9.9 -> 8.5 s), but rounded apart from the
    same ops run eagerly, which Adam turned into different weights within 4 steps (a
    compiled-equals-eager test): segments keep the defaults too. jaxlib 0.12 has no such switch
    and compiles small programs about as fast already. Over `base_compile_options()`."""
    if jax.default_backend() != "cpu":
        return base_compile_options()
    version = tuple(int(p) for p in importlib.metadata.version("jaxlib").split(".")[:2])
    older = {"xla_cpu_use_fusion_emitters": False} if version < (0, 11) else {}
    return {**base_compile_options(), **older}


# What XLA's option parser takes (anything else fails in the binding with an unreadable error).
_OPTION_VALUE_TYPES = (str, bool, int, float)


@dataclass(frozen=True)
class CompileOptions:
    """How a `Segment` compiles: donation, shardings, XLA options, rematerialization.

    Args:
        donate: indices of the inputs the inference forward may donate (their buffers are
            consumed by the call and deleted).
        in_shardings: one sharding per input of the inference forward, given to
            `jax.jit(in_shardings=...)`; they must agree with shardings carried by the segment's
            `in_avals` (jax checks). None: the inputs' own shardings.
        out_shardings: a sharding, or a tuple with one per output, for the inference forward
            (`jax.jit(out_shardings=...)`). None: XLA chooses (as `jax.jit` does).
        compiler_options: `(name, value)` XLA options for every executable, e.g.
            `(("xla_cpu_enable_fast_math", True),)`; a mapping is accepted and sorted.
        conv_options: `(name, value)` XLA options for the executables that contain a
            convolution (found in their jaxpr, nested ones included), over `compiler_options`:
            options meant for convolutions that would slow other executables down (on XLA:CPU,
            keeping convolutions off YNNPACK also takes matmuls off it).
        executable_options: `(kind, ((name, value), ...))` options for one kind of executable
            only ("forward", "forward_vjp" or "backward"), overriding the two above.
        layout: None, or "channels_last": the segment's convolutions compute channels-last
            (NHWC) behind its channels-first (NCHW) inputs and outputs, the layout propagating
            through the ops between them (`xla_segments.layout`); faster on XLA:CPU.
        remat: the training forward's residuals. False: whatever `jax.vjp` keeps; True: only the
            inputs (`jax.checkpoint`, nothing saveable: the backward recomputes the forward);
            "dots": also the outputs of matmuls and convolutions
            (`jax.checkpoint_policies.dots_saveable`), everything else is recomputed.
        per_rank: a `PerRank` (mesh of one device per rank, axis name) for a function written
            for one rank's arrays that calls collectives over that axis (MegEngine's per-rank
            style): it is compiled SPMD under `shard_map`, and its executables take and return
            this rank's local arrays. Not combined with donation.

    Options compare and hash by value; `with_` returns a changed copy, validated again.

    >>> opts = CompileOptions(donate=(0,), compiler_options={"xla_cpu_enable_fast_math": True})
    >>> opts.compiler_options
    (('xla_cpu_enable_fast_math', True),)
    >>> opts.with_(remat=True) == CompileOptions(donate=(0,), remat=True,
    ...                                          compiler_options=opts.compiler_options)
    True
    >>> opts.for_kind("backward")["xla_cpu_enable_fast_math"]
    True
    """

    donate: tuple[int, ...] = ()
    in_shardings: tuple | None = None
    out_shardings: Any = None
    compiler_options: tuple[tuple[str, Any], ...] = ()
    conv_options: tuple[tuple[str, Any], ...] = ()
    executable_options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    remat: bool | str = False
    per_rank: PerRank | None = None
    layout: str | None = None

    def __post_init__(self) -> None:
        normalized = {
            "donate": _donate(self.donate),
            "in_shardings": _in_shardings(self.in_shardings),
            "out_shardings": (tuple(self.out_shardings) if isinstance(self.out_shardings, list)
                              else self.out_shardings),
            "compiler_options": _xla_options("compiler_options", self.compiler_options),
            "conv_options": _xla_options("conv_options", self.conv_options),
            "executable_options": _executable_options(self.executable_options),
            "remat": _remat(self.remat),
            "per_rank": _per_rank(self.per_rank),
            "layout": _layout(self.layout),
        }
        for name, value in normalized.items():
            _check_hashable(name, value)
            object.__setattr__(self, name, value)

    def with_(self, **changes: Any) -> CompileOptions:
        """A copy with `changes` applied (and validated), like `dataclasses.replace`."""
        return dataclasses.replace(self, **changes)

    def for_kind(self, kind: str, convolves: bool = False) -> dict[str, Any]:
        """The XLA options for one kind of executable: `base_compile_options()`, then
        `compiler_options`, then (if it `convolves`) `conv_options`, then that kind's
        `executable_options` over them."""
        if kind not in EXECUTABLE_KINDS:
            raise ValueError(f"unknown executable kind {kind!r}; kinds: {EXECUTABLE_KINDS}")
        merged = {**base_compile_options(), **dict(self.compiler_options)}
        if convolves:
            merged.update(self.conv_options)
        merged.update(dict(self.executable_options).get(kind, ()))
        return merged

    def remat_policy(self) -> Any:
        """The `jax.checkpoint` policy for `remat`, or None when nothing is rematerialized."""
        if self.remat is False:
            return None
        if self.remat is True:
            return jax.checkpoint_policies.nothing_saveable
        return jax.checkpoint_policies.dots_saveable


def _donate(donate: Any) -> tuple[int, ...]:
    items = (donate,) if isinstance(donate, int) else donate
    try:
        items = tuple(items)
    except TypeError:
        raise TypeError(f"CompileOptions.donate must be a tuple of input indices, "
                        f"got {donate!r}") from None
    for i in items:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"CompileOptions.donate must hold int input indices, got {i!r}")
        if i < 0:
            raise ValueError(f"CompileOptions.donate: input index {i} is negative")
    return tuple(sorted(set(items)))


def _in_shardings(in_shardings: Any) -> tuple | None:
    if in_shardings is None or isinstance(in_shardings, tuple):
        return in_shardings
    if isinstance(in_shardings, list):
        return tuple(in_shardings)
    raise TypeError(f"CompileOptions.in_shardings must be None or a tuple with one sharding "
                    f"per input, got {type(in_shardings).__name__}")


def _pairs(field: str, options: Any, what: str) -> list[tuple]:
    """`options` (a mapping, or an iterable of pairs) as a list of 2-tuples."""
    pairs = options.items() if isinstance(options, Mapping) else options
    try:
        pairs = [tuple(p) for p in pairs]
    except TypeError:
        raise TypeError(f"CompileOptions.{field} must be ({what}) pairs or a mapping, "
                        f"got {options!r}") from None
    for pair in pairs:
        if len(pair) != 2:
            raise TypeError(f"CompileOptions.{field}: {pair!r} is not a ({what}) pair")
    return pairs


def _xla_options(field: str, options: Any) -> tuple[tuple[str, Any], ...]:
    """`(name, value)` pairs, sorted by name, each checked to be something XLA can parse."""
    pairs = _pairs(field, options, "name, value")
    for pair in pairs:
        if not isinstance(pair[0], str):
            raise TypeError(f"CompileOptions.{field}: {pair!r} is not a (name, value) pair")
        if not isinstance(pair[1], _OPTION_VALUE_TYPES):
            raise TypeError(f"CompileOptions.{field}: option {pair[0]!r} has a value of type "
                            f"{type(pair[1]).__name__}; XLA takes str, bool, int or float")
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"CompileOptions.{field}: an option is given twice in {names}")
    return tuple(sorted(pairs))


def _executable_options(options: Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    out = {}
    for kind, kind_options in _pairs("executable_options", options, "kind, options"):
        if kind not in EXECUTABLE_KINDS:
            raise ValueError(f"CompileOptions.executable_options: unknown executable kind "
                             f"{kind!r}; kinds: {EXECUTABLE_KINDS}")
        if kind in out:
            raise ValueError(f"CompileOptions.executable_options: kind {kind!r} given twice")
        out[kind] = _xla_options(f"executable_options[{kind!r}]", kind_options)
    return tuple(sorted(out.items()))


def _remat(remat: Any) -> bool | str:
    if isinstance(remat, bool):
        return remat
    if isinstance(remat, str):
        if remat in REMAT_VALUES:
            return remat
        raise ValueError(f"CompileOptions.remat: unknown value {remat!r}; "
                         f"accepted: {REMAT_VALUES}")
    raise TypeError(f"CompileOptions.remat must be a bool or 'dots', got {remat!r}")


def _layout(layout: Any) -> str | None:
    if layout in LAYOUTS:
        return layout
    raise ValueError(f"CompileOptions.layout: unknown layout {layout!r}; accepted: {LAYOUTS}")


def _per_rank(per_rank: Any) -> PerRank | None:
    if per_rank is None or isinstance(per_rank, PerRank):
        return per_rank
    raise TypeError(f"CompileOptions.per_rank must be None or a PerRank, got {per_rank!r}")


def _check_hashable(name: str, value: Any) -> None:
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"CompileOptions.{name} must be hashable (options are cache keys), "
                        f"got {value!r}") from None
