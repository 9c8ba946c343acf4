"""Ragged results whose length is not their input's (eager/core/ragged_forms.py): concatenations,
slices, top-k and sorts, NMS, scatters through a selection, and tensors made at a count read
from the data. Values and gradients are checked against the exact arrays in
tests/eager/ragged_programs.py (the programs "concat rows", "slices", "topk sort",
"count-sized", "sampler"); here: what they keep ragged, NMS, draws, and that a detection head
built from them stops compiling once its capacities are seen."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from tests.helpers import examples

COVERED = {"ragged_concat", "ragged_setitem", "ragged_topk", "ragged_fit", "ragged_edge"}


@pytest.fixture
def ladder():
    """Selections at the ladder's capacities, their counts read on the host."""
    eg.set_ragged_buckets(2.0, small_source=0)
    yield
    eg.set_ragged_buckets(2.0)


def _selection(n: int, keep: int):
    x = eg.tensor(np.arange(n, dtype=np.float32))
    return x[x < keep]


def test_a_length_read_is_a_row_count_that_makes_ragged_tensors(ladder):
    r = _selection(20, 5)
    n = r.shape[0]
    assert n == 5 and hash(n) == hash(5) and type(n + 1) is int and type(-n) is int
    assert type(pickle.loads(pickle.dumps(n))) is int and type(copy.deepcopy(n)) is int
    for made in (F.zeros(r.shape), F.zeros_like(r), F.ones((n, 2)), F.full((n, 1), 3),
                 F.full_like(r, 7.0)):
        assert eg.hooks.ragged_length(made) == 5 and eg.hooks.data(made).shape[0] == 8
        assert made.shape[0] == 5
    np.testing.assert_array_equal(F.full((n, 1), 3).numpy(), np.full((5, 1), 3))
    assert F.zeros(int(n)).shape == (5,) and eg.hooks.ragged_length(F.zeros(int(n))) is None


def test_a_draw_at_a_count_is_the_exact_draw(ladder):
    """A draw whose size is read from the data is ragged, and its rows are the values a draw of
    exactly that many rows gives (jax's draws are prefix-stable)."""
    for draw in (eg.random.uniform, eg.random.normal):
        eg.random.seed(11)
        want = draw(size=(5,)).numpy()
        eg.random.seed(11)
        got = draw(size=eg.tensor(5))
        assert eg.hooks.ragged_length(got) == 5 and eg.hooks.data(got).shape == (8,)
        np.testing.assert_array_equal(got.numpy(), want)
        eg.random.seed(11)
        np.testing.assert_array_equal(draw(size=_selection(9, 5).shape[0]).numpy(), want)
    padding = eg.hooks.data(eg.random.uniform(size=eg.tensor(5)))
    assert np.all(np.asarray(padding)[5:] == np.asarray(padding)[0])  # the padding rule


def test_concat_keeps_rows_ragged_at_the_totals_capacity(ladder):
    a, b = _selection(20, 5), _selection(20, 3)
    both = F.concat([a, eg.tensor([[100.0]]).reshape(1), b])
    assert both.shape == (9,) and eg.hooks.data(both).shape == (16,)
    np.testing.assert_array_equal(both.numpy(), [0, 1, 2, 3, 4, 100, 0, 1, 2])
    head = both[:-2]
    assert head.shape == (7,) and eg.hooks.ragged_length(head) == 7
    np.testing.assert_array_equal(head.numpy(), [0, 1, 2, 3, 4, 100, 0])


def test_ops_on_equal_lengths_in_different_storages_run_on_the_storage():
    """A selection and a concatenation of the same length line up (the storage is moved),
    and so does a dense tensor made at the length with `len()` (a plain int)."""
    x = eg.tensor(np.arange(12, dtype=np.float32))
    sel = x[x < 6]
    joined = F.concat([x[x < 2], x[(x >= 2) & (x < 6)]])
    assert eg.hooks.data(sel).shape == (12,) and eg.hooks.data(joined).shape == (24,)
    before = eg.ragged_fallbacks()
    total = (sel * joined + eg.tensor(np.ones(len(sel), np.float32))).sum()
    assert total.item() == float(sum(i * i + 1 for i in range(6)))
    assert eg.ragged_fallbacks() == before


def _boxes(rng, n):
    corner = rng.uniform(0, 40, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(1, 20, (n, 2))], 1).astype(np.float32)


@settings(examples(10), deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([5, 17, 40]), st.floats(0.0, 1.0),
       st.sampled_from([None, 1, 3, 100]), st.sampled_from([0, 4096]))
def test_nms_over_a_selection_equals_nms_over_its_exact_rows(seed, n, keep, limit, small):
    rng = np.random.default_rng(seed)
    boxes, scores = _boxes(rng, n), rng.uniform(size=n).astype(np.float32)
    scores[rng.integers(0, n, n // 3)] = 0.5  # ties: the later box first
    mask = rng.uniform(size=n) < keep
    want = F.vision.nms(eg.tensor(boxes[mask]), eg.tensor(scores[mask]), 0.4, limit).numpy()
    eg.set_ragged_buckets(2.0, small_source=small)
    try:
        m = eg.tensor(mask)
        got = F.vision.nms(eg.tensor(boxes)[m], eg.tensor(scores)[m], 0.4, limit)
        np.testing.assert_array_equal(got.numpy(), want)
    finally:
        eg.set_ragged_buckets(2.0)


def _head(w, gm, count):
    """A small two-stage head with `count` candidates above the threshold: selection, NMS,
    concatenation with ground truth, the zoo's sampler and a scatter, a loss over the kept.
    The boxes are apart (NMS keeps every candidate) and the first `count // 2` candidates are
    foreground, so every count inside the head follows `count`."""
    rows = np.arange(256, dtype=np.float32)
    x0 = np.where(rows < count // 2, 30.0, 5.0).astype(np.float32)
    boxes = eg.tensor(np.stack([x0, rows * 100, x0 + 10, rows * 100 + 10], 1))
    scores = eg.tensor(np.where(rows < count, 1 - rows / 1000, 0.1).astype(np.float32))
    truth = eg.tensor(np.array([[0, 0, 5, 5]] * 3, np.float32))
    with gm:
        feats = F.matmul(boxes, w)
        keep = scores > 0.5
        kept = F.vision.nms(boxes[keep], scores[keep], 0.7)
        rois = F.concat([boxes[keep][kept], truth])
        labels = (rois[:, 0] > 20).astype("int32")
        chosen = labels == 1
        valid = chosen.sum()
        if valid > 4:
            noise = F.zeros_like(labels).astype("float32")
            noise[chosen] = eg.random.uniform(size=valid)
            _, surplus = F.topk(noise, k=valid - 4)
            labels[surplus] = 0
        tags = F.full((rois.shape[0], 1), 1.0)
        loss = (F.concat([rois, tags], axis=1)[:, :4] * labels.reshape(-1, 1)).sum() \
            + feats[keep][kept][1:].sum()
        gm.backward(loss)
    assert labels.sum().item() == min(count // 2, 4)
    w.grad = None


@pytest.mark.slow
def test_a_detection_head_stops_compiling_once_its_capacities_are_seen(ladder):
    """Counts change every step; once the ends of each capacity's range have run, nothing
    compiles and nothing runs on exact arrays for the counts in between."""
    from benchmarks.compiles import count_compiles

    rng = np.random.default_rng(0)
    w = eg.Parameter(rng.normal(size=(4, 4)).astype(np.float32))
    gm = GradManager().attach([w])
    # 33..61 candidates: 36..64 RoIs (one rung), 16..30 foreground (rungs 16 and 32), a
    # surplus of 12..26 (rungs 16 and 32)
    for count in (33, 34, 40, 41, 42, 61):
        _head(w, gm, count)
    before = eg.ragged_fallbacks()
    with count_compiles() as seen:
        for count in rng.integers(35, 61, 12):
            _head(w, gm, int(count))
    assert seen.count == 0, dict(seen.names)
    assert eg.ragged_fallbacks() == before
