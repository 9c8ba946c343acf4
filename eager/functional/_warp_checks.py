"""Argument checks of the `F.vision` image functions (`vision.py`): each returns the argument in
the form the op takes, or raises this project's error naming the function, the argument, what
it got and what would fit."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import OpTypeError
from ..core.index_checks import check_range
from ..core.op_errors import bad_argument
from ..core.ops.color import MODES
from ..core.ops.correlation import correlation_shape
from ..core.ops.warp import BORDERS, fixed_point
from ..core.tensors import Tensor
from ._args import _float_input, _ints, _t

# MegEngine lists these, but its CPU kernels refuse them or leave pixels unwritten
_UNWRITTEN = ("isolated", "transparent")


def image(fn: str, inp: Any, what: str = "inp", layout: str = "NCHW") -> Tensor:
    """A 4-d float image."""
    x = _t(inp)
    if x.ndim != 4:
        raise bad_argument(f"{fn}: {what} must be a 4-d {layout} image batch, got shape "
                           f"{x.shape}.")
    _float_input(fn, x, what)
    return x


def choice(fn: str, name: str, value: Any, options: tuple[str, ...], hint: str = "") -> str:
    """A string option, in either case, as written in `options`."""
    word = value.lower() if isinstance(value, str) else None
    found = [o for o in options if o.lower() == word]
    if not found:
        raise bad_argument(f"{fn}: {name} must be one of {', '.join(map(repr, options))}; got "
                           f"{value!r:.60}.{hint}")
    return found[0]


def border(fn: str, border_mode: Any) -> str:
    hint = ""
    if isinstance(border_mode, str) and border_mode.lower() in _UNWRITTEN:
        hint = (" MegEngine names it too, but on the CPU it refuses it or returns pixels it "
                "never wrote; 'constant' with border_val fills the outside with one value.")
    return choice(fn, "border_mode", border_mode, BORDERS, hint)


def interpolation(fn: str, interp_mode: Any, format: str, channels: int) -> str:
    """"linear", or for an NHWC image of 1 to 3 channels also "nearest", "cubic" and
    "lanczos4" (MegEngine's fixed-point kernel, `eager/core/ops/warp.py`)."""
    if fixed_point(format, channels):
        return choice(fn, "interp_mode", interp_mode, ("linear", "nearest", "cubic", "lanczos4"))
    hint = ""
    if isinstance(interp_mode, str) and interp_mode.lower() in ("nearest", "cubic",
                                                                 "lanczos4"):
        hint = (f" MegEngine samples an image of this layout ({format}, {channels} channels) "
                f"bilinearly only; {interp_mode!r} needs an NHWC image of 1 to 3 channels "
                f"(format='NHWC').")
    return choice(fn, "interp_mode", interp_mode, ("linear",), hint)


def layout(fn: str, format: Any) -> str:
    return choice(fn, "format", format, ("NCHW", "NHWC"))


def out_size(fn: str, out_shape: Any) -> tuple[int, int]:
    """(height, width) >= 1 from two ints (a tuple, list or Tensor) or one int for both."""
    oh, ow = _ints(fn, "out_shape", out_shape, 2)
    if min(oh, ow) < 1:
        raise bad_argument(f"{fn}: out_shape must be (height, width) >= 1, got {(oh, ow)}.")
    return oh, ow


def matrices(fn: str, mat: Any, rows: int, count: int, of: str) -> Tensor:
    """(count, rows, 3) float32 transformation matrices."""
    m = _t(mat)
    if m.ndim != 3 or m.shape[1:] != (rows, 3) or m.shape[0] != count:
        raise bad_argument(f"{fn}: mat must have shape ({count}, {rows}, 3), one {rows} x 3 "
                           f"matrix per {of}; got shape {m.shape}.")
    if np.dtype(m.dtype).kind not in "fiuV":
        raise bad_argument(f"{fn}: mat has dtype {np.dtype(m.dtype)}; it must hold numbers.",
                           OpTypeError)
    return m if m.dtype == np.float32 else m.astype(np.float32)


def image_indices(fn: str, mat_idx: Any, batch: int) -> Tensor:
    """mat_idx as a 1-d int32 Tensor of image indices in [0, batch)."""
    values = mat_idx if isinstance(mat_idx, Tensor) else np.asarray(mat_idx)
    kind = np.dtype(values.dtype).kind
    if values.ndim != 1 or kind not in "iu":
        raise bad_argument(f"{fn}: mat_idx must be a 1-d sequence of ints (the image each "
                           f"matrix warps), got {mat_idx!r:.80}.", OpTypeError)
    check_range(fn, values, batch, "mat_idx entry", size=f"a batch of {batch} images")
    t = _t(values)
    return t if t.dtype == np.int32 else t.astype(np.int32)


def color_mode(mode: Any) -> str:
    """MegEngine's spelling rule (upper case, but "YCrCb" as written), then a float mode."""
    if not isinstance(mode, str):
        raise bad_argument(f"cvt_color: mode must be a string such as 'RGB2GRAY', got "
                           f"{mode!r:.60}.", OpTypeError)
    name = mode if "YCrCb" in mode else mode.upper()
    if name not in MODES:
        hint = (" MegEngine converts those YUV layouts (NV12, NV21, YV12, YU12, YCrCb) of "
                "uint8 images only; this function converts float images." if "YUV" in name
                or "YCrCb" in name else "")
        raise bad_argument(f"cvt_color: mode must be one of {', '.join(MODES)}; got "
                           f"{mode!r:.60}.{hint}")
    return name


def correlation_attrs(x: Tensor, kernel_size: Any, max_displacement: Any, stride1: Any,
                      stride2: Any, pad_size: Any) -> dict[str, int]:
    """The op's integer attributes, checked, with an output of at least one pixel."""
    fn = "correlation"
    attrs = {"kernel_size": kernel_size, "max_displacement": max_displacement,
             "stride1": stride1, "stride2": stride2, "pad_size": pad_size}
    attrs = {k: _ints(fn, k, v, 1)[0] for k, v in attrs.items()}
    if attrs["kernel_size"] < 1 or attrs["kernel_size"] % 2 == 0:
        raise bad_argument(f"{fn}: kernel_size must be a positive odd int (the patch is "
                           f"centred on a pixel), got {attrs['kernel_size']}.")
    if min(attrs["stride1"], attrs["stride2"]) < 1 \
            or min(attrs["max_displacement"], attrs["pad_size"]) < 0:
        raise bad_argument(f"{fn}: stride1 and stride2 must be >= 1, max_displacement and "
                           f"pad_size >= 0; got {attrs}.")
    shape = correlation_shape(x.shape, **attrs)
    if min(shape[2:]) < 1:
        raise bad_argument(
            f"{fn}: inputs of shape {x.shape} give no output with these attributes: the "
            f"{attrs['max_displacement']} + {attrs['kernel_size'] // 2} pixels of border on "
            f"each side (max_displacement + kernel_size // 2) leave nothing of the image padded "
            f"by pad_size={attrs['pad_size']}. Raise pad_size or lower max_displacement.")
    return attrs

