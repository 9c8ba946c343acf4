"""Samplers: batch sizes and counts, the ranks' shards, seeds, argument checks, resuming from a
position. (Index sequences equal MegEngine's: the parity cases in tests/parity/cases_data.py.)"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eager.data import (
    ArrayDataset,
    Infinite,
    RandomSampler,
    ReplacementSampler,
    SequentialSampler,
    StreamSampler,
)
from eager.data.sampler import Position, tracked_batches


class Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


@given(n=st.integers(1, 60), batch=st.integers(1, 8), drop_last=st.booleans(),
       world=st.integers(1, 4))
def test_ranks_take_disjoint_equal_shards_covering_the_epoch(n, batch, drop_last, world):
    if -(-n // world) < batch:
        return  # the sampler refuses it (tested below)
    samplers = [RandomSampler(Sized(n), batch, drop_last, world_size=world, rank=r)
                for r in range(world)]
    shards = [[i for b in s for i in b] for s in samplers]
    per_rank = -(-n // world)
    for s, shard in zip(samplers, shards):
        batches = list(s)
        assert len(batches) == len(s)
        assert all(len(b) == batch for b in batches[:-1])
        assert len(shard) == (per_rank // batch * batch if drop_last else per_rank)
    if not drop_last:
        covered = [i for shard in shards for i in shard]
        assert set(covered) == set(range(n))
        assert len(covered) == per_rank * world  # the padding repeats the epoch's head only
    if not drop_last and n % world == 0:
        assert sorted(i for shard in shards for i in shard) == list(range(n))


def test_a_seed_repeats_the_order_and_each_epoch_draws_a_new_one():
    a, b = RandomSampler(Sized(20), 4, seed=3), RandomSampler(Sized(20), 4, seed=3)
    first = list(a)
    assert first == list(b)
    assert list(a) != first
    assert sorted(i for batch in first for i in batch) == list(range(20))


def test_without_a_seed_ranks_still_agree():
    shards = [list(RandomSampler(Sized(12), 2, world_size=2, rank=r)) for r in range(2)]
    flat = [{i for b in s for i in b} for s in shards]
    assert not flat[0] & flat[1]


def test_sequential_and_given_indices():
    assert list(SequentialSampler(Sized(5), 2)) == [[0, 1], [2, 3], [4]]
    assert list(SequentialSampler(Sized(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    assert list(SequentialSampler(Sized(5), 2, indices=[4, 2, 0])) == [[4, 2], [0]]
    assert sorted(sum(RandomSampler(Sized(5), 2, indices=[7, 8, 9], seed=0), [])) == [7, 8, 9]


def test_replacement_sampler_draws_by_weight():
    s = ReplacementSampler(Sized(4), 5, num_samples=200, weights=[0, 1, 0, 3], seed=0)
    drawn = [i for b in s for i in b]
    assert len(drawn) == 200 and set(drawn) <= {1, 3}
    assert drawn.count(3) > drawn.count(1)


def test_infinite_repeats_its_sampler_and_delegates_attributes():
    inner = SequentialSampler(Sized(5), 2)
    it = Infinite(inner)
    assert [next(it) for _ in range(4)] == [[0, 1], [2, 3], [4], [0, 1]]
    assert it.batch_size == 2 and len(it) > 10**18


def test_stream_sampler_counts_positions():
    assert list(itertools.islice(StreamSampler(3), 2)) == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size should be a positive integer"),
    ({"batch_size": True}, "batch_size should be a positive integer"),
    ({"drop_last": 1}, "drop_last should be a boolean"),
    ({"batch_size": 9}, "num_samples should be greater than batch_size"),
])
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RandomSampler(Sized(8), **kwargs)


def test_bad_indices_and_weights():
    with pytest.raises(ValueError, match="indices should be None or a sequence"):
        SequentialSampler(Sized(4), indices={1, 2})
    with pytest.raises(ValueError, match="should be equal to"):
        ReplacementSampler(Sized(4), weights=[1, 2])


@given(skip=st.integers(0, 14))
def test_tracked_batches_resume_where_a_position_says(skip):
    """Starting from the position after batch `skip` gives the rest of the stream."""
    def fresh():
        return Infinite(RandomSampler(ArrayDataset(list(range(11))), 3, seed=5))

    whole = list(itertools.islice(tracked_batches(fresh(), Position(0, 0, None)), 15))
    if skip == 0:
        start = Position(0, 0, None)
    else:
        start = whole[skip - 1][0]
    rest = list(itertools.islice(tracked_batches(fresh(), start), 15 - skip))
    assert [b for _, b in rest] == [b for _, b in whole[skip:]]
    assert [(p.epoch, p.batch) for p, _ in rest] == [(p.epoch, p.batch) for p, _ in whole[skip:]]
