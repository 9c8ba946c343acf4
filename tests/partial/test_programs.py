"""Random short programs over the op registry: `partial_trace(f)` equals `f` in values and in
gradients (of a parameter, a closed-over tensor and an attached argument)."""

import functools as ft

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
from eager.autodiff import GradManager
from partial import partial_trace
from tests.eager.references import BINARY, UNARY
from tests.helpers import examples

from .differential import assert_all_close

POSITIVE_LO = 0.5

UNARY_OPS = sorted(UNARY)
BINARY_OPS = sorted(BINARY)
REDUCTIONS = ["sum", "mean", "max", "min"]


def _into(domain, v):
    """Map any real tensor into an op's domain, differentiably (as both runs do the same)."""
    lo, hi = domain
    if lo >= 0:  # positive
        return eg.apply(eg.OPS["abs"], v) + POSITIVE_LO
    if hi < 1:  # (-0.9, 0.9)
        return eg.apply(eg.OPS["tanh"], v) * 0.9
    return eg.apply(eg.OPS["tanh"], v) * 2


def _program(steps):
    """A function of (x, w, c) applying `steps`, each (kind, op, operand choices)."""

    def run(x, w, c):
        values = [x, w, c]
        for kind, name, picks in steps:
            a = values[picks[0] % len(values)]
            if kind == "unary":
                out = eg.apply(eg.OPS[name], _into(UNARY[name][1], a))
            elif kind == "binary":
                b = values[picks[1] % len(values)]
                dom = BINARY[name][1]
                out = eg.apply(eg.OPS[name], _into(dom, a), _into(dom, b))
            else:  # a reduction over the last axis, broadcast back
                out = a + getattr(a, name)(axis=-1, keepdims=True)
            values.append(out)
        return values[-1], values[-2]

    return run


step = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(UNARY_OPS), st.tuples(st.integers(0, 9))),
    st.tuples(st.just("binary"), st.sampled_from(BINARY_OPS),
              st.tuples(st.integers(0, 9), st.integers(0, 9))),
    st.tuples(st.just("reduce"), st.sampled_from(REDUCTIONS), st.tuples(st.integers(0, 9))),
)


@pytest.mark.slow
@examples(12)
@given(steps=st.lists(step, min_size=1, max_size=6), seed=st.integers(0, 2**16))
def test_random_programs_compile_to_the_same_values_and_gradients(steps, seed):
    rng = np.random.default_rng(seed)
    data = [rng.uniform(-2, 2, (3, 4)).astype(np.float32) for _ in range(3)]
    cotangent = eg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    results = []
    for wrap in (lambda f: f, partial_trace):
        x, w, c = eg.Parameter(data[0]), eg.Parameter(data[1]), eg.tensor(data[2])
        f = wrap(ft.partial(_program(steps), w=w, c=c))
        gm = GradManager().attach([x, w])
        with gm:
            out, prev = f(x)
            gm.backward([out, prev], [cotangent, cotangent])
        results.append([t.numpy() for t in (out, prev)] +
                       [None if t.grad is None else t.grad.numpy() for t in (x, w)])
    assert_all_close(results[1], results[0])
