"""`F.sliding_window` (im2col) and `F.sliding_window_transpose` (col2im), MegEngine's: values
against a numpy reference by slicing, gradients against `jax.vjp` of the references, and the
transpose against the definition <windows(x), y> = <x, transpose(y)>."""

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
from tests.helpers import normal

from .op_check import check_op

COVERED = {"sliding_window", "sliding_window_transpose"}
CASES = [  # kernel, padding, stride, dilation, input (N, C, H, W)
    ((2, 3), (1, 1), (2, 1), (1, 2), (2, 3, 5, 6)),
    ((3, 3), (0, 0), (1, 1), (1, 1), (1, 2, 4, 4)),
]


def windows_ref(x, kernel, padding, stride, dilation):
    """Slicing, window by window (numpy or jax arrays)."""
    xp = np if isinstance(x, np.ndarray) else __import__("jax.numpy").numpy
    (kh, kw), (ph, pw), (sh, sw), (dh, dw) = kernel, padding, stride, dilation
    x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    rows = [xp.stack([x[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                        j * sw:j * sw + dw * (kw - 1) + 1:dw] for j in range(ow)], 2)
            for i in range(oh)]
    return xp.stack(rows, 2)


@pytest.mark.parametrize("kernel, padding, stride, dilation, shape", CASES)
def test_sliding_window_against_slicing(rng, kernel, padding, stride, dilation, shape):
    x = normal(rng, *shape)
    attrs = {"kernel": kernel, "padding": padding, "stride": stride, "dilation": dilation}
    check_op("sliding_window", [x], lambda v: windows_ref(v, **attrs), attrs)
    got = M.SlidingWindow(kernel, padding, stride, dilation)(eg.tensor(x)).numpy()
    np.testing.assert_allclose(got, windows_ref(x, **attrs), rtol=1e-6)


@pytest.mark.parametrize("kernel, padding, stride, dilation, shape", CASES)
def test_sliding_window_transpose_is_the_adjoint(rng, kernel, padding, stride, dilation, shape):
    x = normal(rng, *shape)
    attrs = {"kernel": kernel, "padding": padding, "stride": stride, "dilation": dilation}
    y = normal(rng, *windows_ref(x, **attrs).shape)
    back = F.sliding_window_transpose(eg.tensor(y), shape[2:], kernel, padding, stride,
                                      dilation).numpy()
    # <windows(x), y> == <x, transpose(y)> for every x and y
    np.testing.assert_allclose((windows_ref(x, **attrs) * y).sum(), (x * back).sum(), rtol=1e-4)

    def ref(v):
        import jax
        import jax.numpy as jnp

        zeros = jnp.zeros(shape, v.dtype)
        return jax.linear_transpose(lambda u: windows_ref(u, **attrs), zeros)(v)[0]

    check_op("sliding_window_transpose", [y], ref, {"size": shape[2:], **attrs})


def test_sliding_window_bad_arguments_name_the_function():
    with pytest.raises(eg.OpArgumentError, match="sliding_window: the window"):
        F.sliding_window(eg.ones((1, 1, 2, 2)), 3)
    with pytest.raises(eg.OpArgumentError, match="sliding_window_transpose: an output"):
        F.sliding_window_transpose(eg.ones((1, 1, 2, 2, 3, 3)), (5, 5), 3)
