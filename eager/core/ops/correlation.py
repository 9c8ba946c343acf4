"""FlowNet's correlation layer (MegEngine's `F.vision.correlation`): how well each patch of one
feature map matches the patches around it in another.

Rules are MegEngine 1.13's CPU kernel's, measured against it (`tests/parity/cases_warp.py`):
both NCHW maps are zero-padded by `pad_size`; output pixel (y, x) compares the k x k patch of
the first map centred at (y * stride1 + border, x * stride1 + border), border =
max_displacement + k // 2, with the patch of the second map displaced by (dy, dx), each a
multiple of stride2 up to max_displacement; output channel (dy / stride2 + r) * (2 r + 1) +
(dx / stride2 + r), r = max_displacement // stride2. The comparison is the mean over the patch
and the channels of a * b, or of |a - b|. The output size is static, so the op compiles inside
regions.
"""

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import OpArgumentError
from .checks import Found, dims, image
from .registry import defop

_INTS = ("kernel_size", "max_displacement", "stride1", "stride2", "pad_size")


def correlation_shape(shape, *, kernel_size, max_displacement, stride1, stride2, pad_size):
    """The output shape (N, D, OH, OW) for NCHW inputs of `shape` (a size may be <= 0)."""
    n, _, h, w = shape
    border = max_displacement + kernel_size // 2
    grid = 2 * (max_displacement // stride2) + 1
    out = [-(-(size + 2 * pad_size - 2 * border) // stride1) for size in (h, w)]
    return (n, grid * grid, *out)


def _before(inputs: Sequence, attrs: dict) -> Found:
    """Two NCHW float maps of one shape, and integer attributes with an output of at least one
    pixel."""
    a, b = inputs
    if (found := image(a, "data1") or image(b, "data2")) is not None:
        return found
    if dims(a) != dims(b):
        return OpArgumentError, (f"data1 and data2 must have one shape, got {dims(a)} and "
                                 f"{dims(b)}.")
    ints = {k: attrs[k] for k in _INTS}
    if ints["kernel_size"] < 1 or ints["kernel_size"] % 2 == 0:
        return OpArgumentError, ("kernel_size must be a positive odd int (the patch is centred "
                                 f"on a pixel), got {ints['kernel_size']}.")
    if min(ints["stride1"], ints["stride2"]) < 1 \
            or min(ints["max_displacement"], ints["pad_size"]) < 0:
        return OpArgumentError, ("stride1 and stride2 must be >= 1, max_displacement and "
                                 f"pad_size >= 0; got {ints}.")
    if min(correlation_shape(dims(a), **ints)[2:]) < 1:
        return OpArgumentError, (
            f"inputs of shape {dims(a)} give no output with these attributes: the "
            f"{ints['max_displacement']} + {ints['kernel_size'] // 2} pixels of border on each "
            f"side (max_displacement + kernel_size // 2) leave nothing of the image padded by "
            f"pad_size={ints['pad_size']}. Raise pad_size or lower max_displacement.")
    return None


@defop("correlation", before=_before)
def correlation(a, b, *, kernel_size, max_displacement, stride1, stride2, pad_size, multiply):
    """(N, D, OH, OW), computed in float32 and returned in a's dtype. One displacement at a
    time (`lax.map`): FlowNetC compares 441 of them over 256 channels."""
    k, md = kernel_size, max_displacement
    n, c = a.shape[:2]
    _, _, oh, ow = correlation_shape(a.shape, kernel_size=k, max_displacement=md,
                                     stride1=stride1, stride2=stride2, pad_size=pad_size)
    pad = [(0, 0), (0, 0), (pad_size, pad_size), (pad_size, pad_size)]
    first, second = (jnp.pad(t.astype(jnp.float32), pad) for t in (a, b))
    span = ((oh - 1) * stride1 + k, (ow - 1) * stride1 + k)
    first = first[:, :, md:md + span[0], md:md + span[1]]
    radius = md // stride2
    steps = (np.arange(2 * radius + 1) - radius) * stride2
    offsets = np.stack(np.meshgrid(steps, steps, indexing="ij"), -1).reshape(-1, 2) + md

    def compare(offset):
        moved = lax.dynamic_slice(second, (0, 0, offset[0], offset[1]), (n, c, *span))
        terms = first * moved if multiply else jnp.abs(first - moved)
        return lax.reduce_window(terms.sum(1), np.float32(0), lax.add, (1, k, k),
                                 (1, stride1, stride1), "VALID")

    out = lax.map(compare, jnp.asarray(offsets, jnp.int32)) / np.float32(k * k * c)
    return out.transpose(1, 0, 2, 3).astype(a.dtype)
