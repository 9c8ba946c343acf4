"""Convolution ops (1-, 2- and 3-d, and transposed), over NC... inputs, and the one convolution
check that they and the deformable convolution (`deformable.py`) share.

The check (`conv_check`) finds the first rule a convolution's arguments break, in one order:
tensors present, ranks, float dtypes, groups, channels, window attributes, bias, an output of at
least one position. Each op words the faults in its own way (a `Wording`: fault -> error class
and text), which names the faults it reports: the others are not looked for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..amp_policy import LOW
from ..conv_switch import conv_options, on_switch
from ..errors import OpArgumentError, OpTypeError
from . import conv_forms
from .checks import Found, dims, float_only, kind, missing, out_size, shape_of
from .nn import channel
from .registry import defop

#: fault -> (error class, text with `str.format` fields from `_facts`)
Wording = dict[str, tuple[type, str]]
_LAYOUTS = {2: "(N, C, H, W)", 3: "(N, C, D, H, W)"}  # else (N, C, L)
_WINDOW = ("stride", "padding", "output_padding", "dilation")


def conv_check(x: Any, weight: Any, bias: Any, attrs: dict, wording: Wording, *,
               transposed: bool = False) -> Found:
    """The first fault of a convolution of `x` with `weight` (and `bias`, None: not checked)
    that `wording` names, worded by it; None when there is none. `transposed`: the weight is
    (in, out / groups, *kernel), as a transposed convolution's."""
    if (found := missing((x, weight), ("input", "weight"))) is not None:
        return found
    for fault, extra in _faults(x, weight, bias, attrs, transposed):
        if fault in wording:
            cls, text = wording[fault]
            return cls, text.format(**_facts(x, weight, attrs), **extra)
    return None


def _faults(x: Any, weight: Any, bias: Any, attrs: dict,
            transposed: bool) -> Iterator[tuple[str, dict]]:
    """Every broken rule, in the order they are reported (a generator: a later rule is looked
    at only when the wording skips the earlier faults)."""
    xs, ws = dims(x), dims(weight)
    n = len(attrs.get("stride", (1, 1)))
    if len(xs) != n + 2:
        yield "input_rank", {}
    if len(ws) != n + 2:
        yield "weight_rank", {}
    for value, what in ((x, "input"), (weight, "weight")):
        if float_only(value, what) is not None:
            yield "dtype", {"what": what, "dtype": np.dtype(value.dtype)}
    groups = attrs.get("groups", 1)
    if groups < 1 or ws[0] % groups:
        yield "groups", {}
    if xs[1] != (ws[0] if transposed else ws[1] * groups):
        yield "channels", {}
    yield from _window_faults(attrs)
    bs = shape_of(bias)
    if bs is not None and math.prod(bs) != (ws[1] * groups if transposed else ws[0]):
        yield "bias", {"bias_shape": bs}
    if not transposed and min(out_size(xs[2:], ws[2:], attrs["stride"], attrs["padding"],
                                       attrs["dilation"])) < 1:
        yield "empty", {}


def _window_faults(attrs: dict) -> Iterator[tuple[str, dict]]:
    """The window attributes' rules: stride and dilation >= 1, padding >= 0, output padding
    below the stride or the dilation."""
    for name in ("stride", "dilation"):
        if any(v < 1 for v in attrs.get(name, ())):
            yield "window", {"name": name, "value": attrs[name]}
    if any(p < 0 for p in attrs.get("padding", ())):
        yield "padding", {}
    if any(o >= max(s, d) for o, s, d in zip(attrs.get("output_padding", ()),
                                             attrs.get("stride", ()), attrs.get("dilation", ()))):
        yield "output_padding", {}


def _facts(x: Any, weight: Any, attrs: dict) -> dict[str, Any]:
    """What a wording's text may name (a shape of the wrong rank has what it has)."""
    xs, ws = dims(x), dims(weight)
    n, groups = len(attrs.get("stride", (1, 1))), attrs.get("groups", 1)
    return {"xs": xs, "ws": ws, "rank": n + 2, "layout": _LAYOUTS.get(n, "(N, C, L)"),
            "taps": ", ".join("k" * n), "groups": groups, "kernel": ws[2:], "sizes": xs[2:],
            "channels": xs[1] if len(xs) > 1 else None, "out": ws[0] if ws else None,
            "need": ws[1] * groups if len(ws) > 1 else None,
            "window": {k: attrs[k] for k in _WINDOW if k in attrs},
            **{k: attrs.get(k) for k in _WINDOW}}


_DTYPE = ("the {what} has dtype {dtype}; it must be a float tensor: convert it with "
          ".astype('float32').")

#: `conv`'s explanation after a failed call (`F.conv1d`, `F.conv2d`, `M.Conv2d`)
CONV: Wording = {
    "input_rank": (OpTypeError, "the input has shape {xs}; it must be {rank}-d {layout}: add a "
                                "batch axis with x[None] / F.expand_dims(x, 0)."),
    "weight_rank": (OpTypeError, "the weight has shape {ws}; it must be {rank}-d, (out, "
                                 "in / groups, {taps})."),
    "dtype": (OpTypeError, "the {what} has dtype {dtype}; this op needs float tensors: convert "
                           "it with .astype('float32')."),
    "groups": (OpArgumentError, "groups={groups} must be >= 1 and divide the {out} output "
                                "channels of the weight {ws}."),
    "channels": (OpArgumentError, "the input of shape {xs} has {channels} channels but the "
                                  "weight of shape {ws} with groups={groups} expects {need} "
                                  "(weight.shape[1] * groups). Give the input that many "
                                  "channels or build the layer with the input's channel count."),
    "window": (OpArgumentError, "{name}={value} must be >= 1."),
    "padding": (OpArgumentError, "padding={padding} must be >= 0."),
    "bias": (OpArgumentError, "the bias has shape {bias_shape}; it needs one value per output "
                              "channel ({out})."),
}
#: what `conv`'s wrappers check before the call: what jax would take silently (integers),
#: refuse only when compiling (a zero stride) or obscurely (a wrong number of axes)
_CONV_BEFORE: Wording = {k: CONV[k] for k in ("input_rank", "weight_rank", "dtype", "window",
                                              "padding")}
_CONV3D_WINDOW = (OpArgumentError, "stride={stride} and dilation={dilation} must be >= 1, "
                                   "padding={padding} >= 0.")
_CONV3D_RANK = (OpArgumentError, "needs a 5-d (N, C, D, H, W) input and a 5-d (out, in / groups, "
                                 "kd, kh, kw) weight, got shapes {xs} and {ws}.")
_CONV3D_CHANNELS = (OpArgumentError, "the input of shape {xs} has {channels} channels; the weight "
                                     "of shape {ws} with groups={groups} needs weight.shape[1] * "
                                     "groups of them, and groups must divide its {out} output "
                                     "channels.")
CONV3D: Wording = {
    "input_rank": _CONV3D_RANK, "weight_rank": _CONV3D_RANK, "dtype": (OpTypeError, _DTYPE),
    "groups": _CONV3D_CHANNELS, "channels": _CONV3D_CHANNELS, "window": _CONV3D_WINDOW,
    "padding": _CONV3D_WINDOW, "bias": CONV["bias"],
    "empty": (OpArgumentError, "the kernel {kernel} (dilation {dilation}) is larger than the "
                               "input's size {sizes} plus padding {padding}."),
}
_TRANSPOSE_CHANNELS = (OpArgumentError, "the input of shape {xs} has {channels} channels but the "
                                        "weight of shape {ws} (in, out / groups, kh, kw) expects "
                                        "{out}.")
CONV_TRANSPOSE: Wording = {**_CONV_BEFORE, "channels": _TRANSPOSE_CHANNELS}
_TRANSPOSE3D_SHAPES = (OpArgumentError, "needs a 5-d (N, C, D, H, W) input and a 5-d (in, "
                                        "out / groups, kd, kh, kw) weight with in = C divisible "
                                        "by groups={groups}, got shapes {xs} and {ws}.")
_TRANSPOSE3D_WINDOW = (OpArgumentError, "stride and dilation must be >= 1, padding >= 0 and "
                                        "output_padding below stride or dilation, got {window}.")
#: what `F.conv_transpose3d` checks before the call
_CONV_TRANSPOSE3D: Wording = {
    **dict.fromkeys(("input_rank", "weight_rank", "groups", "channels"), _TRANSPOSE3D_SHAPES),
    "dtype": (OpTypeError, _DTYPE),
    **dict.fromkeys(("window", "padding", "output_padding"), _TRANSPOSE3D_WINDOW),
}


_CONV_DIMS = {3: ("NCH", "OIH", "NCH"), 4: ("NCHW", "OIHW", "NCHW"),
              5: ("NCDHW", "OIDHW", "NCDHW")}


def _conv_options(**_attrs: Any) -> dict | None:
    """XLA options for a convolution's jitted forward and backward: on the CPU, XLA's own
    convolutions rather than YNNPACK's slow weight gradient (`eager.set_conv_rewrites`). An
    eager convolution keeps NCHW: a lone NHWC convolution behind transposes was not measured
    faster (XLA:CPU transposes around an NCHW one itself)."""
    return conv_options(jax.default_backend())


def _conv_before(inputs: Sequence, attrs: dict) -> Found:
    """Cheap where the arguments are fine (the common case); the rest is explained only if the
    call fails."""
    x, weight = inputs[:2]
    n = len(attrs["stride"])
    try:
        if (x.ndim == weight.ndim == n + 2 and kind(x) in "fc" and kind(weight) in "fc"
                and min(attrs["stride"] + attrs["dilation"]) >= 1 and min(attrs["padding"]) >= 0):
            return None
    except AttributeError:  # not tensors: the check says which
        pass
    return conv_check(x, weight, None, attrs, _CONV_BEFORE)


def _conv_explain(inputs: Sequence, attrs: dict) -> Found:
    x, weight, bias = inputs
    return conv_check(x, weight, bias, attrs, CONV)


@defop("conv", compiler_options=_conv_options, amp=LOW, check=_conv_explain,
       before=_conv_before)
def conv(x, weight, bias, *, stride, padding, dilation, groups):
    settings = dict(stride=stride, padding=padding, dilation=dilation)
    if conv_forms.as_matmul(x, weight, groups=groups, **settings):
        y = conv_forms.conv_matmul(x, weight, **settings)
    else:
        y = lax.conv_general_dilated(
            x, weight, window_strides=stride, padding=[(p, p) for p in padding],
            rhs_dilation=dilation, dimension_numbers=_CONV_DIMS[x.ndim],
            feature_group_count=groups,
        )
    return y if bias is None else y + channel(bias, y.ndim)


def _transpose_explain(inputs: Sequence, attrs: dict) -> Found:
    x, weight, bias = inputs
    return conv_check(x, weight, bias, attrs, CONV_TRANSPOSE, transposed=True)


def _transpose_before(inputs: Sequence, attrs: dict) -> Found:
    """What `F.conv_transpose3d` checks before the call (its bias is not looked at)."""
    x, weight = inputs[:2]
    return conv_check(x, weight, None, attrs, _CONV_TRANSPOSE3D, transposed=True)


@defop("conv_transpose", compiler_options=_conv_options, amp=LOW, check=_transpose_explain,
       before=_transpose_before)
def conv_transpose(x, weight, bias, *, stride, padding, output_padding, dilation, groups):
    # The gradient of a convolution: dilate the input by the stride and convolve with the
    # flipped kernel, whose (in, out/groups) layout is regrouped to (out, in/groups).
    cin, cout_g, *k = weight.shape
    w = weight.reshape((groups, cin // groups, cout_g, *k)).swapaxes(1, 2)
    w = jnp.flip(w.reshape((groups * cout_g, cin // groups, *k)), range(2, 2 + len(k)))
    pads = [
        (d * (kk - 1) - p, d * (kk - 1) - p + op)
        for kk, p, op, d in zip(k, padding, output_padding, dilation)
    ]
    y = lax.conv_general_dilated(
        x, w, window_strides=(1,) * len(k), padding=pads, lhs_dilation=stride,
        rhs_dilation=dilation, dimension_numbers=_CONV_DIMS[x.ndim], feature_group_count=groups,
    )
    return y if bias is None else y + channel(bias, y.ndim)


def _conv3d_before(inputs: Sequence, attrs: dict) -> Found:
    x, weight, bias = inputs
    return conv_check(x, weight, bias, attrs, CONV3D)


@defop("conv3d", compiler_options=_conv_options, amp=LOW, before=_conv3d_before)
def conv3d(x, weight, bias, *, stride, padding, dilation, groups):
    """Cross-correlation of NCDHW `x` with an (out, in / groups, kd, kh, kw) weight."""
    y = lax.conv_general_dilated(
        x, weight, window_strides=stride, padding=[(p, p) for p in padding],
        rhs_dilation=dilation, dimension_numbers=_CONV_DIMS[5], feature_group_count=groups,
    )
    return y if bias is None else y + channel(bias, y.ndim)


@on_switch
def _rebuild_convolutions() -> None:
    for op in (conv, conv_transpose, conv3d):
        op.drop_compiled()
