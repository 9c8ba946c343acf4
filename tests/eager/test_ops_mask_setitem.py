"""`x[mask] = value` as a select (`mask_setitem`, `eager/core/indexing.py: mask_assigned`):
values and gradients against jax's assignment at the mask's indices over shapes, masks over the
leading axes, value shapes and dtypes; no host read in eager code and no graph break in a
region; the assignments it does not cover still going by indices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eager as eg
from eager.autodiff import GradManager
from eager.core import tensors
from partial import partial_trace
from tests.eager.op_check import check_op

COVERED = {"mask_setitem"}


def _by_indices(x, value, mask):
    """The reference: numpy's `x[mask] = value` (value broadcast to the selection)."""
    idx = jnp.nonzero(mask)
    part = x[idx]
    return x.at[idx].set(jnp.broadcast_to(jnp.asarray(value, x.dtype), part.shape))


@st.composite
def assignments(draw):
    lead = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    rest = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    dtype = draw(st.sampled_from([np.float32, np.int32]))
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((*lead, *rest)) * 4).astype(dtype)
    mask = rng.random(lead) < draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    each = tuple(r if draw(st.booleans()) else 1 for r in rest)[len(rest) - draw(
        st.integers(0, len(rest))):]
    kind = draw(st.sampled_from(["number", "tensor", "lead"]))
    if kind == "number":
        value = float(rng.standard_normal()) if dtype == np.float32 else int(rng.integers(9))
    else:
        shape = (1, *each) if kind == "lead" else each
        value = (rng.standard_normal(shape) * 4).astype(dtype)
    return x, mask, value


@settings(max_examples=30, deadline=None)
@given(assignments())
def test_a_mask_assignment_matches_jaxs_at_the_masks_indices(case):
    x, mask, value = case
    want = np.asarray(_by_indices(jnp.asarray(x), value, mask))
    t = eg.tensor(x)
    t[eg.tensor(mask)] = eg.tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(t.numpy(), want)


@settings(max_examples=20, deadline=None)
@given(assignments())
def test_its_gradients_are_jaxs_through_the_old_value_and_the_value(case):
    x, mask, value = case
    x = x.astype(np.float32)
    value = np.asarray(value, np.float32)
    base, written = eg.Parameter(x), eg.Parameter(value)
    cot = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    with GradManager().attach([base, written]) as gm:
        y = base * 1.0
        y[eg.tensor(mask)] = written
        gm.backward((y * eg.tensor(cot)).sum())
    _, pull = jax.vjp(lambda a, v: _by_indices(a, v, mask), jnp.asarray(x), jnp.asarray(value))
    gx, gv = pull(jnp.asarray(cot))
    np.testing.assert_array_equal(base.grad.numpy(), gx)  # kept or zero: exact
    np.testing.assert_allclose(written.grad.numpy(), gv, rtol=1e-5, atol=1e-5)


def test_the_op_against_jax():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7
    mask = np.array([[True, False, True], [False, False, True]])
    check_op("mask_setitem", [x, np.full((1, 4), 2.5, np.float32), mask],
             lambda a, v, m: jnp.where(m[..., None], v[0], a), {"lead": True})
    check_op("mask_setitem", [x, np.float32(-1.0), mask],
             lambda a, v, m: jnp.where(m[..., None], v, a), {"lead": False})


def test_a_large_mask_is_assigned_without_a_host_read(monkeypatch):
    """A mask over more candidates than a selection keeps on the device (4096 by default)
    used to read its count on the host; an assignment needs none."""
    reads = []
    real = tensors.Tensor._host
    monkeypatch.setattr(tensors.Tensor, "_host", lambda t, *a: reads.append(a) or real(t, *a))
    x = eg.tensor(np.linspace(-1, 1, 10000, dtype=np.float32))
    x[x < 0] = 0.0
    assert reads == []
    assert x.numpy().min() == 0.0 and x.numpy()[-1] == 1.0


def test_a_mask_assignment_does_not_break_a_region():
    @partial_trace(graph_breaks=True)
    def f(x):
        labels = x * 2
        labels[x < 0] = -1.0
        labels[(x > 0.5) & (x < 2)] = 7.0
        return labels + 1

    x = eg.tensor(np.linspace(-1, 3, 9, dtype=np.float32))
    got = f(x).numpy()
    want = x.numpy() * 2
    want[x.numpy() < 0] = -1.0
    want[(x.numpy() > 0.5) & (x.numpy() < 2)] = 7.0
    np.testing.assert_array_equal(got, want + 1)
    assert "without graph breaks" in f.explain()  # no value read: one segment, no break


X = np.array([[-1.0, 2.0, 3.0], [4.0, -5.0, 6.0]], np.float32)


@pytest.mark.parametrize("case", ["a value for each selected element", "a mask and an int",
                                  "a numpy mask", "a mask over the last axes"])
def test_other_assignments_still_go_by_indices(case):
    """What a select cannot do (a value of the selection's length) or is not asked to do."""
    want, t = X.copy(), eg.tensor(X)
    if case == "a value for each selected element":
        want[X > 0] = np.arange(4)
        t[t > 0] = eg.tensor(np.arange(4, dtype=np.float32))
    elif case == "a mask and an int":
        want[X[:, 0] > 0, 1] = 9.0
        t[t[:, 0] > 0, 1] = 9.0
    elif case == "a numpy mask":
        want[X > 0] = 9.0
        t[X > 0] = 9.0
    else:
        want[:, X[0] > 0] = 9.0
        t[:, eg.tensor(X[0] > 0)] = 9.0
    np.testing.assert_array_equal(t.numpy(), want)
