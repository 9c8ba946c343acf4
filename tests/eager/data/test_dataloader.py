"""DataLoader: what batches look like (MegEngine's: lists of numpy arrays, dtypes kept), in
the loader's process and in workers, streams, `preload`, and augmentations that repeat for a
seed whatever `num_workers` is."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import eager as eg
import eager.data.transform as T
from eager.data import (
    ArrayDataset,
    Collator,
    DataLoader,
    Dataset,
    Infinite,
    RandomSampler,
    SequentialSampler,
    StreamDataset,
    StreamSampler,
    get_worker_info,
    rng,
)


def digits(n: int = 10) -> ArrayDataset:
    x = np.arange(n * 6, dtype=np.uint8).reshape(n, 2, 3)
    return ArrayDataset(x, np.arange(n, dtype=np.int64), np.linspace(0, 1, n))


class Noisy(T.Transform):
    """Adds noise drawn from the batch's generator, and a flip drawn the same way."""

    def apply(self, sample):
        x, *rest = sample
        x = x.astype(np.float32) + rng().normal(size=x.shape).astype(np.float32)
        return (x[::-1] if rng().random_sample() < 0.5 else x, *rest)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_lists_of_numpy_arrays_with_dtypes_kept(workers):
    data = digits()
    loader = DataLoader(data, SequentialSampler(data, 4), num_workers=workers)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    x, y, z = batches[0]
    assert isinstance(batches[0], list)
    assert (x.dtype, y.dtype, z.dtype) == (np.uint8, np.int64, np.float64)
    assert x.shape == (4, 2, 3) and batches[-1][0].shape == (2, 2, 3)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), np.arange(10))


def test_default_sampler_gives_one_sample_at_a_time():
    batches = list(DataLoader(digits(3)))
    assert [b[1].tolist() for b in batches] == [[0], [1], [2]]


@pytest.mark.parametrize("workers", [0, 2])
def test_transform_and_custom_collator(workers):
    class Sum(Collator):
        def apply(self, inputs):
            return {"total": sum(int(s[1]) for s in inputs), "n": len(inputs)}

    data = digits()
    out = list(DataLoader(data, SequentialSampler(data, 5), transform=Noisy(), collator=Sum(),
                          num_workers=workers))
    assert out == [{"total": 10, "n": 5}, {"total": 35, "n": 5}]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_augmentations_repeat_for_a_seed_whatever_num_workers_is(workers):
    data = digits(23)

    def epochs(n_workers):
        loader = DataLoader(data, RandomSampler(data, 4, seed=11), transform=Noisy(),
                            num_workers=n_workers)
        return [b[0] for _ in range(2) for b in loader]

    reference, other = epochs(0), epochs(workers)
    assert len(reference) == len(other) == 12
    for a, b in zip(reference, other):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(reference[0], reference[6])  # a new epoch draws anew


def test_the_seed_comes_from_eager_random_without_a_sampler_seed():
    data = digits()

    def first(seed):
        eg.random.seed(seed)
        return next(iter(DataLoader(data, SequentialSampler(data, 4), transform=Noisy())))[0]

    np.testing.assert_array_equal(first(1), first(1))
    assert not np.array_equal(first(1), first(2))


def test_vision_transforms_draw_from_the_batch_generator():
    images = np.random.default_rng(0).integers(0, 255, (12, 20, 24, 3), dtype=np.uint8)
    data = ArrayDataset(images, np.arange(12))
    pipeline = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(),
                          T.Normalize(mean=[100.0] * 3, std=[50.0] * 3), T.ToMode("CHW")],
                         order=("image", "image_category"))

    def run(workers):
        return list(DataLoader(data, RandomSampler(data, 4, seed=0), transform=pipeline,
                               num_workers=workers))

    a, b = run(0), run(2)
    assert a[0][0].shape == (4, 3, 16, 16) and a[0][0].dtype == np.float32
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


@pytest.mark.parametrize("workers", [0, 2])
def test_preload_yields_tensors_on_the_device(workers):
    data = digits()
    loader = DataLoader(data, SequentialSampler(data, 4), num_workers=workers, preload=True)
    batches = list(loader)
    assert len(batches) == 3
    x, y, z = batches[1]
    assert isinstance(x, eg.Tensor) and x.dtype == np.uint8 and x.shape == (4, 2, 3)
    np.testing.assert_array_equal(y.numpy(), [4, 5, 6, 7])
    plain = list(DataLoader(data, SequentialSampler(data, 4), num_workers=workers))
    np.testing.assert_array_equal(batches[2][0].numpy(), plain[2][0])


Pair = collections.namedtuple("Pair", "image label")


def test_namedtuple_and_dict_samples_keep_their_structure():
    class Named(Dataset):
        def __getitem__(self, i):
            return {"pair": Pair(np.full(2, i, np.float32), i), "name": f"s{i}"}

        def __len__(self):
            return 4

    batch = next(iter(DataLoader(Named(), SequentialSampler(Named(), 2), num_workers=1)))
    assert isinstance(batch["pair"], Pair) and batch["name"] == ["s0", "s1"]
    np.testing.assert_array_equal(batch["pair"].label, [0, 1])


class Counting(StreamDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.idx, info.worker) if info else (0, 1)
        for i in range(start, self.n, step):
            yield np.array([i], np.int32), i


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_batches_end_with_the_stream(workers):
    batches = list(DataLoader(Counting(10), StreamSampler(3), num_workers=workers))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_parallel_stream_workers_read_their_own_split():
    batches = list(DataLoader(Counting(10), StreamSampler(2), num_workers=2,
                              parallel_stream=True))
    seen = sorted(i for b in batches for i in b[1].tolist())
    assert seen == list(range(10))
    assert all(len(set(i % 2 for i in b[1].tolist())) == 1 for b in batches)  # one worker each


def test_an_infinite_sampler_goes_on_across_iterators():
    data = digits(5)
    loader = DataLoader(data, Infinite(SequentialSampler(data, 2)))
    it = iter(loader)
    first = [next(it)[1].tolist() for _ in range(4)]
    del it
    assert first == [[0, 1], [2, 3], [4], [0, 1]]
    assert next(iter(loader))[1].tolist() == [2, 3]


@pytest.mark.parametrize("make, error, message", [
    (lambda d: DataLoader(d, num_workers=-1), ValueError, "num_workers should not be negative"),
    (lambda d: DataLoader(d, timeout=-1), ValueError, "timeout should not be negative"),
    (lambda d: DataLoader(d, StreamSampler(2)), TypeError, "read with a MapSampler"),
    (lambda d: DataLoader(Counting(3), SequentialSampler(d)), TypeError, "StreamSampler"),
    (lambda d: DataLoader([1, 2, 3]), TypeError, "reads a Dataset or StreamDataset"),
])
def test_argument_errors(make, error, message):
    with pytest.raises(error, match=message):
        make(digits())


def test_without_a_ram_file_system_batches_travel_through_the_pipe(monkeypatch):
    from eager.data import shared_arrays

    monkeypatch.setattr(shared_arrays, "_RAM_FS", "/nonexistent-ram-fs")
    images = np.arange(8 * 64 * 64 * 3, dtype=np.float32).reshape(8, 64, 64, 3)  # 48 KiB each
    data = ArrayDataset(images, np.arange(8))
    batches = list(DataLoader(data, SequentialSampler(data, 4), num_workers=2))
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), images)


def test_large_batches_come_back_through_shared_memory_unchanged():
    images = np.random.default_rng(0).standard_normal((6, 3, 64, 64)).astype(np.float32)
    data = ArrayDataset(images, np.arange(6))
    batches = list(DataLoader(data, SequentialSampler(data, 3), num_workers=2))
    assert batches[0][0].nbytes >= 64 * 1024  # over the threshold: written to shared memory
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), images)
    batches[0][0][0, 0, 0, 0] = 7.0  # writable, as MegEngine's batches are
