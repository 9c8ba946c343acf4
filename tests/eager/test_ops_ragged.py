"""Ragged tensors (data-dependent selections padded to a capacity, eager/core/ragged.py) against the
same programs on exact arrays: values and gradients over random masks (counts 0, 1, all and in
between), in eager code. The exact path is what `eg.set_ragged_buckets(None)` runs, whose ops
are checked against jax in the other op tests; the regions' side is tests/partial/test_ragged.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from eager.core import ragged_dispatch
from tests.eager.ragged_programs import PROGRAMS, run_program
from tests.helpers import examples

COVERED = {"mask_indices", "ragged_exact"}


def _masks(n: int) -> st.SearchStrategy:
    """Masks over n rows, the edge counts (none, one, all) drawn often."""
    edge = st.sampled_from(["none", "one", "all"]).map(
        lambda k: np.arange(n) < {"none": 0, "one": 1, "all": n}[k])
    return st.one_of(edge, st.lists(st.booleans(), min_size=n, max_size=n).map(np.array))


@st.composite
def cases(draw):
    n = draw(st.sampled_from([1, 6, 13]))  # few shapes: the exact side compiles per shape
    d = draw(st.sampled_from([1, 3]))
    return n, d, draw(_masks(n)), draw(st.integers(0, 2**16)), draw(st.sampled_from(
        sorted(PROGRAMS)))


def _close(a, b, what):
    if a is None or b is None:
        assert a is None and b is None, f"{what}: {a} vs {b}"
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    if a.dtype.kind in "iub":
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True, err_msg=what)


# The two ways a selection in eager code is stored: at a capacity of the ladder, its count read
# on the host (small_source=0, what large sources get), and at the source's size, its count
# left on the device (the default for sources of at most 4096 candidates).
PATHS = {"ladder": 0, "whole": 4096}


@pytest.fixture(params=sorted(PATHS))
def path(request):
    eg.set_ragged_buckets(2.0, small_source=PATHS[request.param])
    yield request.param
    eg.set_ragged_buckets(2.0)


def _ragged_equals_exact(case, path):
    n, d, mask, seed, name = case
    eg.set_ragged_buckets(None)
    try:
        want = run_program(name, n, d, mask, seed)
    finally:
        eg.set_ragged_buckets(2.0, small_source=PATHS[path])
    try:
        got = run_program(name, n, d, mask, seed)
    finally:
        eg.set_ragged_buckets(2.0)
    if isinstance(want, Exception) or isinstance(got, Exception):
        assert type(got) is type(want), f"{name}: {got!r} vs exact {want!r}"
        return
    for what, a, b in zip(("outputs", "grad x", "grad w"), got, want):
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{name} {what} {i} (count {mask.sum()} of {n})")


# The README's command draws a few programs; the slow set (which CI runs too) draws many more.
# Both draw new programs on every run, unlike the profile's fixed draw: runs add up to many
# programs (and the fixed five would cost 40% more than an average draw).
@settings(examples(5), derandomize=False)
@given(cases(), st.sampled_from(sorted(PATHS)))
def test_ragged_equals_exact(case, path):
    _ragged_equals_exact(case, path)


@pytest.mark.slow
@settings(examples(80), derandomize=False)
@given(cases(), st.sampled_from(sorted(PATHS)))
def test_ragged_equals_exact_many_programs(case, path):
    _ragged_equals_exact(case, path)


def test_shape_len_print_numpy_are_logical(path):
    x = eg.tensor(np.arange(20.0, dtype=np.float32).reshape(10, 2))
    r = x[x[:, 0] >= 10]
    assert r.shape == (5, 2) and len(r) == 5 and r.size == 10 and r.ndim == 2
    capacity = {"ladder": 8, "whole": 10}[path]
    assert eg.hooks.ragged_length(r) == 5 and eg.hooks.data(r).shape == (capacity, 2)
    np.testing.assert_array_equal(r.numpy(), np.arange(10.0, 20.0).reshape(5, 2))
    assert "18." in repr(r) and repr(r).count("[") == 6  # five rows, not eight
    assert [row.shape for row in r] == [(2,)] * 5
    assert eg.tensor(r).shape == (5, 2) and r.detach().shape == (5, 2)
    assert r.tolist() == np.arange(10.0, 20.0).reshape(5, 2).tolist()


def test_small_sources_keep_the_count_on_the_device():
    """A selection from at most `small_source` candidates reads nothing on the host: its storage
    has the source's size and its length is a device scalar, read when Python asks for it."""
    import jax

    x = eg.tensor(np.arange(12.0, dtype=np.float32).reshape(6, 2))
    r = x[x[:, 0] > 3]
    n = eg.hooks.ragged_length(r)
    assert isinstance(n, jax.Array) and eg.hooks.data(r).shape == (6, 2)
    y = (r * 2.0)[:, :1]  # runs on the storage: still ragged, the same length object
    assert eg.hooks.ragged_length(y) is n and eg.hooks.data(y).shape == (6, 1)
    assert y.shape == (4, 1) and y.numpy().tolist() == [[8.0], [12.0], [16.0], [20.0]]
    eg.set_ragged_buckets(2.0, small_source=4)  # 6 candidates: above it, the ladder
    try:
        r = x[x[:, 0] > 5]
        assert eg.hooks.ragged_length(r) == 3 and eg.hooks.data(r).shape == (4, 2)
        for bad in (-1, "many", 2.5):
            with pytest.raises(ValueError, match="small_source"):
                eg.set_ragged_buckets(2.0, small_source=bad)
    finally:
        eg.set_ragged_buckets(2.0)


def test_capacities_follow_the_ladder():
    from eager.core.ragged import capacity

    assert [capacity(n, 1000) for n in (0, 1, 2, 3, 5, 9, 100, 513)] == [
        0, 1, 2, 4, 8, 16, 128, 1000]
    assert capacity(70, 100) == 100  # never above the source's size
    eg.set_ragged_buckets(1.5)
    try:
        assert [capacity(n, 1000) for n in (3, 4, 5, 7)] == [3, 5, 5, 8]
        eg.set_ragged_buckets([16, 64])
        assert [capacity(n, 1000) for n in (1, 16, 17, 65)] == [16, 16, 64, 1000]
        with pytest.raises(ValueError, match="growth factor"):
            eg.set_ragged_buckets(1.0)
        eg.set_ragged_buckets(None)
        x = eg.tensor(np.arange(6.0, dtype=np.float32))
        r = x[x > 2]
        assert eg.hooks.ragged_length(r) is None and eg.hooks.data(r).shape == (3,)
    finally:
        eg.set_ragged_buckets(2.0)


def test_padding_is_a_copy_of_row_zero_and_gets_no_gradient(path):
    """Padding holds copies of row 0 (finite where the data is) and its cotangent is zero:
    `1 / x` on a padding row of zeros would give inf, and `0 * inf` a NaN gradient."""
    x = eg.Parameter(np.array([[1.0, -2.0], [0.5, 4.0], [3.0, 0.5], [2.0, 2.0], [0.0, 0.0]],
                              np.float32))
    gm = GradManager().attach([x])
    with gm:
        r = x[eg.tensor([False, True, True, True, False])]  # 3 rows, capacity 4 or 5
        y = F.log(r)
        storage = np.asarray(eg.hooks.data(y))
        gm.backward((y * 2).sum() + F.sqrt(r).mean())
    assert len(storage) == {"ladder": 4, "whole": 5}[path]
    for pad in storage[3:]:
        np.testing.assert_array_equal(pad, storage[0])
    assert np.isfinite(storage).all()
    rows = x.numpy()[1:4]
    want = np.zeros((5, 2), np.float32)
    want[1:4] = 2 / rows + 0.5 / np.sqrt(rows) / 6
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)


def test_ragged_exact_and_mask_indices_ops():
    """The two ops that ragged tensors add: the exact rows of a storage (with its gradient) and
    a selection's padded coordinates with their count."""
    x = eg.Parameter(np.arange(8.0, dtype=np.float32).reshape(4, 2))
    gm = GradManager().attach([x])
    with gm:
        y = eg.apply(eg.OPS["ragged_exact"], x, n=3)
        gm.backward((y * y).sum())
    np.testing.assert_array_equal(y.numpy(), np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(x.grad.numpy(), np.r_[np.arange(6.0) * 2, 0, 0].reshape(4, 2))
    m = eg.tensor([[False, True], [True, True], [False, False]])
    rows, cols, count = eg.apply(eg.OPS["mask_indices"], m, size=6)
    assert count.item() == 3
    assert rows.numpy().tolist() == [0, 1, 1, 0, 0, 0] and cols.numpy().tolist() == [
        1, 0, 1, 1, 1, 1]


def test_further_selection_and_gather_by_a_ragged_index(path):
    x = eg.tensor(np.arange(24.0, dtype=np.float32).reshape(12, 2))
    r = x[x[:, 0] > 4]  # 9 rows, capacity 12 (the source's size)
    rr = r[r[:, 1] < 15]  # a selection of a ragged tensor
    np.testing.assert_array_equal(rr.numpy(), [[6, 7], [8, 9], [10, 11], [12, 13], [14, 15]][:4])
    idx = F.nonzero(x[:, 0] > 17, as_tuple=True)[0]
    np.testing.assert_array_equal(x[idx].numpy(), np.arange(18.0, 24.0).reshape(3, 2))
    v, i = F.cond_take(x > 20, x)
    assert v.numpy().tolist() == [21.0, 22.0, 23.0] and i.numpy().tolist() == [21, 22, 23]


@pytest.mark.slow
def test_compiles_stop_once_the_buckets_are_seen(path):
    """A head whose count changes every step compiles per capacity, never per count: over 200
    steps with (almost) every count in 1..64, the compiles stop once the buckets are filled
    (one bucket, the source's size, when the count stays on the device)."""
    from benchmarks.compiles import count_compiles

    rng = np.random.default_rng(0)
    w = eg.Parameter(rng.normal(size=(3, 3)).astype(np.float32))
    gm = GradManager().attach([w])

    def step(n_pos):
        x = eg.tensor(rng.normal(size=(64, 3)).astype(np.float32))
        score = eg.tensor(np.arange(64) < n_pos)
        with gm:
            y = F.matmul(x, w)
            sel = y[score]
            loss = F.smooth_l1_loss(sel, sel * 0.5) + sel.max() + F.logsumexp(sel, axis=0).mean()
            gm.backward(loss)
        w.grad = None

    counts = rng.permutation(np.r_[1:65, rng.integers(1, 65, 136)])  # 200 steps
    for c in (1, 2, 4, 8, 16, 32, 64):  # one per bucket first: fills the caches
        step(c)
    before = eg.ragged_fallbacks()
    with count_compiles() as seen:
        for c in counts:
            step(int(c))
    assert seen.count == 0, dict(seen.names)
    assert eg.ragged_fallbacks() == before  # nothing ran on exact arrays


def test_a_zero_dimensional_mask_is_a_clear_error():
    from eager.core.errors import OpIndexError

    x = eg.tensor(np.arange(3.0, dtype=np.float32))
    for mask in (True, eg.tensor(True), np.bool_(False)):
        with pytest.raises(OpIndexError, match="0-d boolean index"):
            x[mask]


def test_a_new_process_reads_how_an_op_runs_on_ragged_storage(cache, monkeypatch):
    """A ragged tensor's ops: the first process traces each op to learn how it runs on the
    padded storage; a new one (nothing in memory) reads that and traces nothing, with the same
    results."""
    traced = []
    check = ragged_dispatch._check
    monkeypatch.setattr(ragged_dispatch, "_check",
                        lambda *a: traced.append(a[0].name) or check(*a))
    eg.set_ragged_buckets(2.0, small_source=4)
    try:
        x = eg.tensor(np.arange(12, dtype=np.float32).reshape(6, 2))

        def program():
            r = x[x[:, 0] > 3.0]
            return ((r * 2.0 + 1.0).sum(axis=1)).numpy()

        monkeypatch.setattr(ragged_dispatch, "_PLANS", {})  # a first process: nothing known
        first = program()
        assert traced
        monkeypatch.setattr(ragged_dispatch, "_PLANS", {})  # a second one: only the disk
        traced.clear()
        np.testing.assert_array_equal(program(), first)
        assert traced == []
        values = np.arange(20, dtype=np.float32).reshape(10, 2)
        x = eg.tensor(values)  # other storage shapes
        np.testing.assert_array_equal(program(), (values[values[:, 0] > 3] * 2 + 1).sum(1))
        assert traced  # other keys: traced, not read
    finally:
        eg.set_ragged_buckets(2.0)
