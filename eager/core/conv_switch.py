"""The switch for the convolution rewrites on XLA:CPU, which make a ResNet step 2.4x faster.

On the CPU, jaxlib 0.10.2 sends float32 convolutions to the YNNPACK library, whose
weight-gradient convolution is slow (https://github.com/openxla/xla/issues/34273); XLA's own
convolutions are 1.7x faster on a ResNet step. Three rewrites, all on by default, work around
XLA:CPU's convolutions:

- the executables that contain a convolution (eager convolution ops, and compiled segments that
  convolve) are compiled with `XLA_CPU_CONV_OPTIONS`, which keep convolutions off YNNPACK. Only
  those: the option also takes matmuls off YNNPACK, which makes an mlp step 16% slower;
- compiled regions (`partial_trace`, `xla_trace`) run their convolutions channels-last (NHWC)
  behind the NCHW API, a further 1.4x on the same step;
- a float32 convolution of a feature map of at most 16 positions (a detector's top pyramid
  levels) is one matrix product over its windows, where XLA:CPU's convolution is 2-5x slower
  (`eager/core/ops/conv_forms.py`; RetinaNet's step 5-7% faster).

`set_conv_rewrites(False)` (or `EAGER_CONV_REWRITES=0` in the environment) turns all three off,
for comparison or if an XLA version makes them slower. Values and gradients agree either way to
float32 round-off.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .context import bump_epoch

#: The XLA options that keep convolutions off YNNPACK, per executable (an enum name: XLA
#: rejects an empty value). Given only to executables that convolve, and only on the CPU.
XLA_CPU_CONV_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}
_ENV = "EAGER_CONV_REWRITES"

_enabled = [os.environ.get(_ENV, "1").strip().lower() not in ("0", "false", "off", "no")]
_listeners: list[Callable[[], None]] = []


def conv_rewrites() -> bool:
    """Whether the convolution rewrites are on (see `set_conv_rewrites`)."""
    return _enabled[0]


def set_conv_rewrites(enabled: bool) -> None:
    """Turn the XLA:CPU convolution rewrites on or off, process-wide (default: on, unless the
    environment variable `EAGER_CONV_REWRITES` is `0`).

    On: executables that convolve are compiled with options that keep convolutions off the slow
    YNNPACK path, and regions compiled by `partial_trace` / `xla_trace` run their convolutions
    channels-last behind the NCHW API (together 2.4x faster on a ResNet training step on CPU),
    and convolutions of feature maps of at most 16 positions are matrix products over their
    windows. Off: XLA's defaults, the NCHW layout and XLA's convolution everywhere. Only the
    CPU is affected. It takes effect at once: eager convolutions and compiled regions compile
    anew on their next call.

    >>> import eager as eg
    >>> eg.set_conv_rewrites(False); eg.conv_rewrites()
    False
    >>> eg.set_conv_rewrites(True)
    """
    enabled = bool(enabled)
    if enabled == _enabled[0]:
        return
    _enabled[0] = enabled
    for listener in _listeners:
        listener()
    bump_epoch()  # compiled regions re-validate, see the change and compile anew


def on_switch(listener: Callable[[], None]) -> Callable[[], None]:
    """Call `listener()` whenever `set_conv_rewrites` changes the setting: the convolution ops
    register one that drops their jitted functions, which hold the options they were built
    with. (So this module, below the ops, needs none of them.)"""
    _listeners.append(listener)
    return listener


def conv_options(platform: str) -> dict | None:
    """The XLA options for an executable on `platform` that convolves (None: the defaults)."""
    return dict(XLA_CPU_CONV_OPTIONS) if platform == "cpu" and _enabled[0] else None
