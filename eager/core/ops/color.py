"""Colour-space conversion of NHWC images (MegEngine's `F.vision.cvt_color`), for float images.

Gray is BT.601's luma 0.299 R + 0.587 G + 0.114 B; YUV is OpenCV's float YUV, chroma centred
on 0.5: U = 0.492 (B - Y) + 0.5, V = 0.877 (R - Y) + 0.5, and back R = Y + 1.140 (V - 0.5),
G = Y - 0.395 (U - 0.5) - 0.581 (V - 0.5), B = Y + 2.032 (U - 0.5). Sums are taken in
MegEngine's order, so the float32 results agree with its to the bit (G of YUV2RGB: nearly).
"""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from ..errors import OpArgumentError
from .checks import Found, dims, image
from .registry import defop

_F32 = np.float32
# mode: (input channels, output channels)
MODES = {"RGB2GRAY": (3, 1), "BGR2GRAY": (3, 1), "RGBA2GRAY": (4, 1), "GRAY2RGB": (1, 3),
         "RGB2BGR": (3, 3), "BGR2RGB": (3, 3), "RGBA2RGB": (4, 3), "RGBA2BGR": (4, 3),
         "RGB2YUV": (3, 3), "YUV2RGB": (3, 3)}


def _luma(r, g, b):
    return r * _F32(0.299) + (g * _F32(0.587) + b * _F32(0.114))


def _to_yuv(r, g, b):
    y = _luma(r, g, b)
    return y, (b - y) * _F32(0.492) + _F32(0.5), (r - y) * _F32(0.877) + _F32(0.5)


def _from_yuv(y, u, v):
    u, v = u - _F32(0.5), v - _F32(0.5)
    return y + v * _F32(1.140), y - (u * _F32(0.395) + v * _F32(0.581)), y + u * _F32(2.032)


def _before(inputs: Sequence, attrs: dict) -> Found:
    """An NHWC float image of the channels `mode` reads (`mode` is one of MODES: the
    wrapper's spelling rule picks it)."""
    (x,), mode = inputs, attrs["mode"]
    if (found := image(x, layout="NHWC")) is not None:
        return found
    channels = MODES[mode][0]
    if dims(x)[3] != channels:
        return OpArgumentError, (f"mode {mode!r} reads NHWC images of {channels} "
                                 f"channel{'s' * (channels > 1)}; got shape {dims(x)}.")
    return None


@defop("cvt_color", before=_before)
def cvt_color(x, *, mode):
    """(N, H, W, C) -> (N, H, W, C') by `mode` (a key of MODES), in x's float dtype."""
    ch = [x[..., i].astype(jnp.float32) for i in range(x.shape[-1])]
    if mode in ("RGB2GRAY", "RGBA2GRAY"):
        out = [_luma(*ch[:3])]
    elif mode == "BGR2GRAY":
        out = [_luma(*ch[2::-1])]
    elif mode == "GRAY2RGB":
        out = ch * 3
    elif mode in ("RGB2BGR", "BGR2RGB", "RGBA2BGR"):
        out = ch[2::-1]
    elif mode == "RGBA2RGB":
        out = ch[:3]
    elif mode == "RGB2YUV":
        out = list(_to_yuv(*ch))
    else:
        out = list(_from_yuv(*ch))
    return jnp.stack(out, -1).astype(x.dtype)
