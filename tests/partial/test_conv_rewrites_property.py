"""The convolution rewrites change how a convolution is computed, never what: with them on
(channels-last inside compiled regions, XLA's own kernels on the CPU, a small map as one matrix
product) values and gradients equal the plain formulation's (NCHW, `lax.conv_general_dilated`,
rewrites off) to rounding, over shapes, strides, padding, dilations, groups and bias, in float32
and under AMP in float16 and bfloat16, in eager ops and in `partial_trace` regions alike."""

from __future__ import annotations

import jax
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax

import eager as eg
import eager.functional as F
from eager import amp
from eager.autodiff import GradManager
from partial import partial_trace

#: Largest difference between the rewritten and the plain formulation, relative to the sum of
#: the magnitudes of what each output adds up (`bounds`): float32 rounding of a reordered sum,
#: or two roundings to the low dtype. Float32's bound is a reordered sum's worst case for these
#: sizes (about 160 terms times float32's 6e-8); largest seen over 100 examples on jax 0.10.2
#: and 0.12: 9e-8, 0 and 3.8e-3 (bfloat16's step is 7.8e-3).
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
#: ... and between the plain formulation under AMP and jax's float32 convolution (seen: 0,
#: 1.1e-3, 8.1e-3).
VS_FLOAT32 = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 3e-2}


@st.composite
def convolutions(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))  # small maps and larger ones
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    # At least one output position: pad a window wider than the map.
    padding = tuple(max(draw(st.integers(0, 2)), (d * (k - 1) + 1 - s + 1) // 2)
                    for s, k, d in zip((h, w), (kh, kw), dilation))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    case = dict(x=rng.standard_normal((draw(st.integers(1, 2)), cin, h, w)),
                w=rng.standard_normal((cout, cin // groups, kh, kw)) * 0.5,
                b=rng.standard_normal(cout) if draw(st.booleans()) else None,
                stride=stride, padding=padding, dilation=dilation, groups=groups,
                dtype=draw(st.sampled_from(["float32", "float32", "float16", "bfloat16"])))
    return {k: v.astype(np.float32) if isinstance(v, np.ndarray) else v
            for k, v in case.items()}


def plain(case, magnitudes: bool = False):
    """The reference in float32 with jax alone: NCHW, OIHW, no rewrite. `magnitudes`: the same
    sums over the absolute values of inputs and cotangent, which bound each output's
    rounding error (a sum of n terms rounds to within n eps of the sum of their magnitudes)."""
    if magnitudes:
        case = {k: np.abs(v) if isinstance(v, np.ndarray) else v for k, v in case.items()}
    def conv(x, w, b):
        y = lax.conv_general_dilated(x, w, case["stride"], [(p, p) for p in case["padding"]],
                                     rhs_dilation=case["dilation"],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                     feature_group_count=case["groups"])
        return y if b is None else y + b[None, :, None, None]
    y, vjp = jax.vjp(conv, case["x"], case["w"], case["b"])
    g = cotangent(case, y.shape)
    return [y, *vjp(np.abs(g) if magnitudes else g)]


def cotangent(case, shape):
    return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


def train(case, compiled: bool):
    """The op's output and gradients (input, weight, bias) as this project computes them."""
    x, w = eg.Parameter(case["x"]), eg.Parameter(case["w"])
    b = None if case["b"] is None else eg.Parameter(case["b"])
    params = [p for p in (x, w, b) if p is not None]

    def net(x):
        return F.conv2d(x, w, b, stride=case["stride"], padding=case["padding"],
                        dilation=case["dilation"], groups=case["groups"])

    fn = partial_trace(net, recompile_limit=10**6) if compiled else net  # a new one per case
    gm = GradManager().attach(params)
    low = case["dtype"] != "float32"
    with gm, amp.autocast(enabled=low, low_prec_dtype="float16" if not low else case["dtype"]):
        y = fn(x)
        gm.backward((y.astype("float32") * eg.tensor(cotangent(case, y.shape))).sum())
    assert y.dtype.name == case["dtype"]
    return [y.numpy().astype(np.float32), x.grad.numpy(), w.grad.numpy(),
            None if b is None else b.grad.numpy()]


def assert_close(got, want, bounds, tolerance, what):
    for name, g, r, bound in zip(("y", "dx", "dw", "db"), got, want, bounds):
        if r is None:
            assert g is None
            continue
        g, r, bound = (np.asarray(a, np.float64) for a in (g, r, bound))
        assert g.shape == r.shape, (what, name)
        err = float((np.abs(g - r) / (bound + 1e-6)).max())
        assert err <= tolerance, f"{what}: {name} off by {err:.2e} of its magnitude"


# `rewrites` restores the switch once, after every example: each example sets it itself.
@settings(max_examples=24, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=convolutions())
def test_rewritten_convolutions_equal_the_plain_formulation(case, rewrites):
    eg.set_conv_rewrites(True)
    eager_on, compiled_on = train(case, compiled=False), train(case, compiled=True)
    eg.set_conv_rewrites(False)
    eager_off = train(case, compiled=False)
    dtype, bounds = case["dtype"], plain(case, magnitudes=True)
    assert_close(eager_on, eager_off, bounds, TOLERANCE[dtype], "eager, rewrites on")
    assert_close(compiled_on, eager_off, bounds, TOLERANCE[dtype], "compiled, rewrites on")
    # And the plain formulation itself is jax's float32 convolution, to the low dtype's rounding.
    assert_close(eager_off, plain(case), bounds, VS_FLOAT32[dtype], "eager, rewrites off")
