"""Independent references shared by several test files, each computed another way than the code
under test:

- the elementwise op tables `UNARY` and `BINARY`: for every unary and binary registry op a jnp
  reference and the input domain its values are drawn from (`values_in`); `test_ops.py` checks
  each op against its row, `tests/partial/test_programs.py` builds random programs from them;
- layers that both the op tests and the module tests check (loops over kernel taps, patches
  gathered by index arithmetic, statistics by hand), in float64 where they take numpy arrays.
  Those of `conv3d`, `pixel_shuffle`, `local_response_norm` and `instance_norm` take numpy or jax
  arrays (`array_namespace`): numpy ones need no compiling, jax ones go under `jax.vjp`.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erf

# ----- elementwise ops ----------------------------------------------------------------------------
# input domains: (low, high)
REAL, POSITIVE, UNIT = (-2.0, 2.0), (0.5, 2.0), (-0.9, 0.9)


def values_in(seed, shape, dtype, domain):
    """Uniform values in `domain` of `shape`, from a generator seeded with `seed`, as `dtype`."""
    lo, hi = domain
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


# name -> (reference, domain)
UNARY = {
    "neg": (lambda x: -x, REAL),
    "abs": (lambda x: jnp.where(x < 0, -x, x), REAL),
    "exp": (jnp.exp, REAL),
    "log": (jnp.log, POSITIVE),
    "log1p": (lambda x: jnp.log(1 + x), UNIT),
    "sqrt": (lambda x: x**0.5, POSITIVE),
    "rsqrt": (lambda x: 1 / jnp.sqrt(x), POSITIVE),
    "sin": (jnp.sin, REAL),
    "cos": (jnp.cos, REAL),
    "tanh": (lambda x: (jnp.exp(2 * x) - 1) / (jnp.exp(2 * x) + 1), REAL),
    "sigmoid": (lambda x: 1 / (1 + jnp.exp(-x)), REAL),
    "relu": (lambda x: x * (x > 0), REAL),
    "gelu": (lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), REAL),
    "silu": (lambda x: x / (1 + jnp.exp(-x)), REAL),
    "softplus": (lambda x: jnp.log(1 + jnp.exp(x)), REAL),
    # halves away from zero (MegEngine's roundf), elsewhere as jnp.round
    "round": (lambda x: jnp.where(jnp.abs(x - jnp.trunc(x)) == 0.5, jnp.trunc(x) + jnp.sign(x),
                                  jnp.round(x)), REAL),
    "floor": (jnp.floor, REAL),
    "ceil": (jnp.ceil, REAL),
    "sign": (jnp.sign, REAL),
}

BINARY = {
    "add": (lambda x, y: x + y, REAL),
    "sub": (lambda x, y: x - y, REAL),
    "mul": (lambda x, y: x * y, REAL),
    "div": (lambda x, y: x / y, POSITIVE),
    "pow": (lambda x, y: jnp.exp(y * jnp.log(x)), POSITIVE),
    "maximum": (lambda x, y: jnp.where(x > y, x, y), REAL),
    "minimum": (lambda x, y: jnp.where(x < y, x, y), REAL),
    "floor_div": (lambda x, y: jnp.floor(x / y), POSITIVE),
    "mod": (lambda x, y: x - jnp.floor(x / y) * y, POSITIVE),
}


# ----- layers -------------------------------------------------------------------------------------
def conv2d_ref(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """Direct NCHW cross-correlation: sum over kernel taps of strided input windows."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, cout, oh, ow))
    cout_g = cout // groups
    for g in range(groups):
        xs = xp[:, g * cin_g:(g + 1) * cin_g]
        ws = w[g * cout_g:(g + 1) * cout_g]
        for i in range(kh):
            for j in range(kw):
                win = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                         j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * cout_g:(g + 1) * cout_g] += np.einsum("nchw,oc->nohw", win,
                                                                 ws[:, :, i, j])
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def normalize_ref(x, axes, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over `axes`, in float64: batch, layer and group norm without
    their affine part."""
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def per_channel(v, ndim):
    """A per-channel vector (C,) shaped to broadcast over an (N, C, ...) array of `ndim` dims."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def array_namespace(x):
    """jnp for jax arrays (a reference under `jax.vjp`), numpy otherwise."""
    return jnp if isinstance(x, jax.Array) else np


def conv3d_ref(x, w, b, stride, padding, dilation, groups):
    """By patches: gather every output position's receptive field from the padded input with
    numpy index arithmetic, then contract it with the weight group by group."""
    xp = array_namespace(x)
    padded = xp.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    cout, cin_g, *k = w.shape
    index = []
    for axis, (n, p, d, kk, s) in enumerate(zip(x.shape[2:], padding, dilation, k, stride)):
        o = (n + 2 * p - d * (kk - 1) - 1) // s + 1
        at = np.arange(o)[:, None] * s + np.arange(kk)[None, :] * d  # (out position, tap)
        shape = [1] * 6
        shape[axis], shape[3 + axis] = o, kk
        index.append(at.reshape(shape))
    patches = padded[:, :, index[0], index[1], index[2]]  # (N, C, oD, oH, oW, kd, kh, kw)
    n, out = x.shape[0], patches.shape[2:5]
    patches = patches.reshape(n, groups, cin_g, *patches.shape[2:])
    y = xp.einsum("ngcdhwxyz,gocxyz->ngodhw", patches,
                  w.reshape(groups, cout // groups, cin_g, *k)).reshape(n, cout, *out)
    return y if b is None else y + b.reshape(1, -1, 1, 1, 1)


def pixel_shuffle_ref(x, r):
    """out[..., c, h, w] = x[..., c * r * r + (h % r) * r + w % r, h // r, w // r]."""
    *_, c, h, w = x.shape
    oc, oh, ow = np.meshgrid(np.arange(c // (r * r)), np.arange(h * r), np.arange(w * r),
                             indexing="ij")
    return x[..., oc * r * r + (oh % r) * r + ow % r, oh // r, ow // r]


def lrn_ref(x, size, k, alpha, beta):
    """Channel by channel: the sum of squares over the window, clipped at both ends."""
    xp, half, c = array_namespace(x), size // 2, x.shape[1]
    sums = [xp.sum(x[:, max(0, i - half):i + half + 1] ** 2, axis=1) for i in range(c)]
    return x / (k + alpha * xp.stack(sums, axis=1)) ** beta


def instance_norm_ref(x, w, b, eps):
    mean = x.mean(axis=(2, 3), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(2, 3), keepdims=True)
    return (x - mean) / (var + eps) ** 0.5 * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)
