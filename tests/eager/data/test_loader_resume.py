"""Resuming: a loader restored from `state_dict()` (saved with `eg.save`, in a new loader, with
any `num_workers`) gives the batches an uninterrupted loader gives, augmentations included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import eager as eg
import eager.data.transform as T
from eager.data import ArrayDataset, DataLoader, Infinite, RandomSampler, StreamDataset, rng
from tests.helpers import examples

DATA = ArrayDataset(np.arange(46, dtype=np.float32).reshape(23, 2), np.arange(23))
BATCHES_PER_EPOCH = 6  # 23 samples in batches of 4


class Noisy(T.Transform):
    def apply(self, sample):
        x, y = sample
        return x + rng().normal(size=x.shape).astype(np.float32), y


def new_loader(workers: int, infinite: bool = False) -> DataLoader:
    sampler = RandomSampler(DATA, 4, seed=7)
    return DataLoader(DATA, Infinite(sampler) if infinite else sampler, transform=Noisy(),
                      num_workers=workers)


def reference(n: int, infinite: bool = False) -> list[np.ndarray]:
    """The first `n` batches of an uninterrupted run, epoch after epoch."""
    loader, out = new_loader(0, infinite), []
    while len(out) < n:
        for x, y in loader:
            out.append(np.concatenate([x.ravel(), y]))
            if len(out) == n:
                break
    return out


class Resumed(RuleBasedStateMachine):
    """Take batches, save, restore into a new loader (changing `num_workers`), and compare
    every batch with the uninterrupted run's."""

    def __init__(self) -> None:
        super().__init__()
        self.expected = reference(40)
        self.taken = 0

    @initialize(workers=st.sampled_from([0, 2]))
    def start(self, workers):
        self.loader, self.it = new_loader(workers), None

    @rule(n=st.integers(1, 4))
    def take(self, n):
        for _ in range(n):
            if self.taken == len(self.expected):
                return
            if self.it is None:
                self.it = iter(self.loader)
            try:
                x, y = next(self.it)
            except StopIteration:
                self.it = None  # the epoch ended: the training loop starts the next
                continue
            np.testing.assert_array_equal(np.concatenate([x.ravel(), y]),
                                          self.expected[self.taken])
            self.taken += 1

    @rule(workers=st.sampled_from([0, 1, 2]))
    def save_and_resume(self, workers):
        path = self.tmp / "loader.pkl"
        eg.save({"loader": self.loader.state_dict()}, str(path))
        self.it = None
        self.loader = new_loader(workers)
        self.loader.load_state_dict(eg.load(str(path))["loader"])

    @invariant()
    def position_counts_the_batches_taken(self):
        state = self.loader.state_dict()
        assert state["epoch"] * BATCHES_PER_EPOCH + state["batch"] >= self.taken


@pytest.fixture
def resumed(tmp_path):
    class WithTmp(Resumed):
        tmp = tmp_path

    return WithTmp


def test_a_resumed_loader_gives_the_uninterrupted_batches(resumed):
    run_state_machine_as_test(resumed, settings=settings(
        examples(5), stateful_step_count=12, database=None))


@pytest.mark.parametrize("cut", [1, 5, 6, 9])
def test_an_infinite_loader_resumes_mid_pass(cut):
    expected = reference(14, infinite=True)
    loader = new_loader(0, infinite=True)
    it = iter(loader)
    taken = [next(it) for _ in range(cut)]
    restored = new_loader(2, infinite=True)
    restored.load_state_dict(loader.state_dict())
    it = iter(restored)
    taken += [next(it) for _ in range(14 - cut)]
    for (x, y), want in zip(taken, expected):
        np.testing.assert_array_equal(np.concatenate([x.ravel(), y]), want)


def test_a_state_saved_between_epochs_starts_the_next_epoch():
    loader = new_loader(0)
    list(loader)
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 0)
    restored = new_loader(0)
    restored.load_state_dict(state)
    second = [np.concatenate([x.ravel(), y]) for x, y in restored]
    for got, want in zip(second, reference(12)[6:]):
        np.testing.assert_array_equal(got, want)


def test_a_stream_loader_has_no_position_to_save():
    class Empty(StreamDataset):
        def __iter__(self):
            yield from ()

    with pytest.raises(TypeError, match="no position to save"):
        DataLoader(Empty()).state_dict()
