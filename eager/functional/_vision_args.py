"""Argument normalisation of the `F.vision` image functions (`vision.py`): each takes an
argument as MegEngine spells it and returns the form the op takes (an option in its canonical
case, ints, an index tensor), or raises this project's error naming the function, the argument,
what it got and what would fit. What the arguments must satisfy beyond their spelling is the
ops' own check (`defop(..., before=)` in `eager/core/ops/warp.py`, `color.py`,
`correlation.py`), which the wrappers run with `require`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import OpTypeError
from ..core.index_checks import check_range
from ..core.op_errors import bad_argument
from ..core.ops.color import MODES
from ..core.ops.warp import BORDERS, fixed_point
from ..core.tensors import Tensor
from ._args import _ints, _t

# MegEngine lists these, but its CPU kernels refuse them or leave pixels unwritten
_UNWRITTEN = ("isolated", "transparent")


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
    """(height, width) from two ints (a tuple, list or Tensor) or one int for both."""
    oh, ow = _ints(fn, "out_shape", out_shape, 2)
    return oh, ow


def image_indices(fn: str, mat_idx: Any) -> Tensor:
    """mat_idx (a sequence, array or Tensor of ints) as a 1-d Tensor."""
    values = mat_idx if isinstance(mat_idx, Tensor) else np.asarray(mat_idx)
    kind = np.dtype(values.dtype).kind
    if values.ndim != 1 or kind not in "iu":
        raise bad_argument(f"{fn}: mat_idx must be a 1-d sequence of ints (the image each "
                           f"matrix warps), got {mat_idx!r:.80}.", OpTypeError)
    return _t(values)


def in_batch(fn: str, index: Tensor, batch: int) -> Tensor:
    """The image indices, read on the host, in [0, batch) (a check of values, which no
    shape rule of the op can make), as int32."""
    check_range(fn, index, batch, "mat_idx entry", size=f"a batch of {batch} images")
    return index if index.dtype == np.int32 else index.astype(np.int32)


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
