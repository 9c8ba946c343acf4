"""A compiled region's tape node, built in one place for whole regions (`entry.py`) and the
stretches of a region with graph breaks (`lazy/stretch.py`): the segment with its compile
options and store, made a node of the eager tape (`autograd_bridge.SegmentFunction`).

When `eager.conv_rewrites()` is on and the region runs on the CPU, its segment compiles the
executables that convolve with XLA's own convolutions instead of YNNPACK's (`conv_options`) and
runs its convolutions channels-last behind the NCHW interface (`layout`): 2.4x faster on a
ResNet step (why: `eager/core/conv_switch.py`). Executables without convolutions are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax

import eager as eg
from autograd_bridge import SegmentFunction
from xla_segments import CompileOptions, Segment, SegmentStore


def compiled_segment(fn: Callable, in_avals: Sequence[Any], name: str,
                     deps: Sequence[frozenset[int]], store: SegmentStore | None, *,
                     finisher: Callable | None = None, **options: Any) -> SegmentFunction:
    """The tape node running `fn` compiled for `in_avals` (`deps`: per output, the inputs it
    depends on differentiably), its executables kept in `store`; `options` as
    `CompileOptions` takes them."""
    segment = Segment(fn, in_avals, name=name, options=segment_options(in_avals, **options),
                      store=store)
    return SegmentFunction(segment, deps, name, finisher)


def segment_options(in_avals: Sequence[Any], **options: Any) -> CompileOptions:
    """`CompileOptions(**options)` plus the convolution rewrites where they apply."""
    conv = eg.hooks.conv_options(_platform(in_avals))
    if conv:
        options.update(conv_options=conv, layout="channels_last")
    return CompileOptions(**options)


def _platform(in_avals: Sequence[Any]) -> str:
    """Where the segment runs: its placed inputs' platform, else the default backend."""
    for a in in_avals:
        sharding = getattr(a, "sharding", None)
        if sharding is not None:
            return next(iter(sharding.device_set)).platform
    return jax.default_backend()
