"""Image ops beyond nn.py's: pixel shuffle, local response normalization and sliding windows
(3-d convolution is in conv.py).

Adaptive max pooling and instance normalization need no op of their own: MegEngine's adaptive
bins are a regular pooling window (`max_pool2d`), and instance normalization is a group
normalization with one channel per group (`group_norm`); `eager/functional/_pool.py` and
`_norm.py` compose them.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..amp_policy import FLOAT32
from ..errors import OpArgumentError
from .checks import Found, dims, float_tensor, out_size
from .registry import defop


def _shuffle_check(inputs: Sequence, attrs: dict) -> Found:
    """Channels (axis -3) that form whole r x r blocks."""
    r, xs = attrs["factor"], dims(inputs[0])
    if r < 1:
        return OpArgumentError, f"upscale_factor must be >= 1, got {r}."
    if len(xs) < 3 or xs[-3] % (r * r):
        return OpArgumentError, (f"the input of shape {xs} needs at least 3 axes and a channel "
                                 f"count (axis -3) divisible by upscale_factor ** 2 = {r * r}.")
    return None


@defop("pixel_shuffle", check=_shuffle_check, before=_shuffle_check)
def pixel_shuffle(x, *, factor):
    """(..., C * r * r, H, W) -> (..., C, H * r, W * r): channel c * r * r + i * r + j goes to
    row offset i and column offset j of output channel c (PyTorch's and MegEngine's order)."""
    *batch, c, h, w = x.shape
    r, lead = factor, len(batch)
    y = x.reshape((*batch, c // (r * r), r, r, h, w))
    axes = (*range(lead), lead, lead + 3, lead + 1, lead + 4, lead + 2)
    return y.transpose(axes).reshape((*batch, c // (r * r), h * r, w * r))


def _lrn_check(inputs: Sequence, attrs: dict) -> Found:
    """A window centred on each channel (an odd size) over the channels of a float tensor."""
    size, xs = attrs["size"], dims(inputs[0])
    if size < 1 or size % 2 == 0:
        return OpArgumentError, f"kernel_size must be a positive odd int, got {size}."
    if len(xs) < 2:
        return OpArgumentError, f"needs an (N, C, ...) input, got shape {xs}."
    return float_tensor(inputs[0], "input")


@defop("local_response_norm", amp=FLOAT32, check=_lrn_check, before=_lrn_check)
def local_response_norm(x, *, size, k, alpha, beta):
    """x / (k + alpha * s) ** beta, where s sums x ** 2 over the `size` channels centred on each
    one (axis 1; channels past either end count as 0). MegEngine does not divide alpha by
    `size`, as PyTorch does."""
    half = size // 2
    window = (1, size) + (1,) * (x.ndim - 2)
    pads = [(0, 0), (half, half)] + [(0, 0)] * (x.ndim - 2)
    s = lax.reduce_window(x * x, np.array(0, x.dtype), lax.add, window, (1,) * x.ndim, pads)
    return x * jnp.power(k + alpha * s, -beta)


def _windows(x, kernel, padding, stride, dilation):
    """The (N, C, OH, OW, kh, kw) windows of NCHW `x`: XLA's patch extraction, whose features
    come ordered (C, kh, kw)."""
    n, c = x.shape[:2]
    patches = lax.conv_general_dilated_patches(
        x, kernel, stride, [(p, p) for p in padding], rhs_dilation=dilation,
        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    oh, ow = patches.shape[2:]
    return patches.reshape(n, c, *kernel, oh, ow).transpose(0, 1, 4, 5, 2, 3)


_WINDOW = ("kernel", "padding", "stride", "dilation")


def _window_rule(attrs: dict) -> Found:
    """A window of at least one tap, moving by at least one, over a padding of at least 0:
    XLA takes a negative padding silently (it crops) and refuses a zero stride only when
    lowering, with a verifier error."""
    if min(attrs["kernel"] + attrs["stride"] + attrs["dilation"]) < 1 \
            or min(attrs["padding"]) < 0:
        window = {k: attrs[k] for k in _WINDOW}
        return OpArgumentError, (f"kernel_size, stride and dilation must be >= 1 and padding "
                                 f">= 0, got {window}.")
    return None


def _sliding_check(inputs: Sequence, attrs: dict) -> Found:
    """The window's attributes, then an NCHW input the (dilated) window fits in, padded."""
    if (found := _window_rule(attrs)) is not None:
        return found
    xs = dims(inputs[0])
    kernel, padding, dilation = attrs["kernel"], attrs["padding"], attrs["dilation"]
    if len(xs) != 4:
        return OpArgumentError, f"needs an NCHW input, got shape {xs}."
    reach = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if any(n + 2 * p < r for n, p, r in zip(xs[2:], padding, reach)):
        return OpArgumentError, (f"the window {kernel} (dilation {dilation}) is larger than the "
                                 f"input's size {xs[2:]} plus padding {padding}.")
    return None


def _sliding_transpose_check(inputs: Sequence, attrs: dict) -> Found:
    """The window's attributes, then the windows an output of `size` has."""
    if (found := _window_rule(attrs)) is not None:
        return found
    xs, size, kernel = dims(inputs[0]), attrs["size"], attrs["kernel"]
    windows = out_size(size, kernel, attrs["stride"], attrs["padding"], attrs["dilation"])
    want = (*xs[:2], *windows, *kernel) if len(xs) == 6 else None
    if xs != want:
        return OpArgumentError, (f"an output of size {size} has windows of shape (N, C, "
                                 f"{windows[0]}, {windows[1]}, {kernel[0]}, {kernel[1]}), got an "
                                 f"input of shape {xs}.")
    return None


@defop("sliding_window", check=_sliding_check, before=_sliding_check)
def sliding_window(x, *, kernel, padding, stride, dilation):
    """MegEngine's `F.sliding_window` (im2col): every window of NCHW `x`, zero-padded, as
    (N, C, OH, OW, kh, kw)."""
    return _windows(x, kernel, padding, stride, dilation)


@defop("sliding_window_transpose", check=_sliding_transpose_check,
       before=_sliding_transpose_check)
def sliding_window_transpose(y, *, size, kernel, padding, stride, dilation):
    """The transpose of `sliding_window` (col2im): each window's values summed back onto the
    (N, C, *size) positions they were taken from."""
    zeros = jnp.zeros((*y.shape[:2], *size), y.dtype)
    (x,) = jax.linear_transpose(lambda v: _windows(v, kernel, padding, stride, dilation),
                                zeros)(y)
    return x
