"""Which form computes a 2-d convolution on XLA:CPU: XLA's own convolution, or, for a small
feature map, one matrix product over the gathered windows.

XLA:CPU's convolution kernels are slow on feature maps of a few positions: on the 2x2 and 4x4
maps of a detector's top pyramid levels (RetinaNet's and FCOS's P6 and P7, 256 channels, 3x3
windows) a forward took 0.9-6.7 ms and its gradients up to 7.3 ms where the same arithmetic as a
matrix product takes 0.2-1.6 ms (`benchmarks.conv_layers`; measured with jax 0.12 on 2 cores:
forward, input and weight gradient 5.9 -> 1.3 ms for 256 -> 256 channels on 2x2, 15.0 -> 2.9
ms for 256 -> 720, 3.2 -> 2.1 ms on 4x4, 3.3 -> 1.8 ms for a stride-2 window over 4x4). From
8x8 positions on, XLA's convolution is as fast or faster (8x8: 4.9 against 7.1 ms), and on
32x32 maps the gathered windows cost 2x. So a convolution whose input has at most
`SMALL_POSITIONS` positions is written as the product of its windows (gathered by strided
slices, in the weight's (in, height, width) order so the OIHW weight is read as it lies) and
the weight; its gradients are jax's, matrix products and padded slices as well.

Only on the CPU, for float32 and groups of 1 (what was measured), and only while the
convolution rewrites are on (`eager.set_conv_rewrites`). The two forms compute the same sums in
a different order: values agree to float32 rounding (tests/eager/test_conv_forms.py).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ..conv_switch import conv_rewrites
from .checks import out_size

#: The most input positions (height x width) for which a convolution is a matrix product.
SMALL_POSITIONS = 16


def as_matmul(x: Any, weight: Any, *, stride: tuple, padding: tuple, dilation: tuple,
              groups: int) -> bool:
    """Whether the convolution of NCHW `x` with OIHW `weight` is computed as a matrix product
    (a pure function of the shapes and settings, decided while tracing)."""
    return (x.ndim == 4 and groups == 1 and x.dtype == jnp.float32
            and weight.dtype == jnp.float32 and x.shape[2] * x.shape[3] <= SMALL_POSITIONS
            and min(out_size(x.shape[2:], weight.shape[2:], stride, padding, dilation)) >= 1
            and conv_rewrites()
            and jax.default_backend() == "cpu")


def conv_matmul(x: Any, weight: Any, *, stride: tuple, padding: tuple, dilation: tuple) -> Any:
    """The convolution of NCHW `x` with OIHW `weight` as one matrix product over its windows."""
    n, c = x.shape[:2]
    o, _, kh, kw = weight.shape
    ho, wo = out_size(x.shape[2:], weight.shape[2:], stride, padding, dilation)
    (sh, sw), (dh, dw) = stride, dilation
    xp = jnp.pad(x, ((0, 0), (0, 0), *((p, p) for p in padding)))
    taps = [lax.slice(xp, (0, 0, a * dh, b * dw),
                      (n, c, a * dh + sh * (ho - 1) + 1, b * dw + sw * (wo - 1) + 1),
                      (1, 1, sh, sw))
            for a in range(kh) for b in range(kw)]
    windows = jnp.stack(taps, axis=2).reshape(n, c * kh * kw, ho, wo)
    y = lax.dot_general(weight.reshape(o, c * kh * kw), windows, (((1,), (1,)), ((), ())))
    return y.transpose(1, 0, 2, 3)
