"""Parity cases for `megengine.data`'s samplers, `Collator` and `DataLoader` batches: the index
lists of `SequentialSampler`, `RandomSampler` and `ReplacementSampler` (seeded; drop_last,
`indices`, `num_samples`, `weights`, several ranks through world_size/rank, several epochs from
one sampler), `Infinite` (batches across epoch boundaries, attributes of the wrapped sampler),
`StreamSampler`, their lengths and the exception classes of bad arguments; the default
collation of tuples, dicts, nested lists, numbers, numpy scalars, strings and bools (values and
dtypes); and the batches of a `DataLoader` over an `ArrayDataset` (in order, shuffled, with a
custom `Collator`, a custom `Transform`, an `Infinite` sampler, several epochs, two worker
processes) and over a finite `StreamDataset`.

MegEngine behaviour measured here and not copied (so left out of the cases):
- MegEngine's serial stream loader never ends: at the end of the stream it swallows the
  `StopIteration` (a bare `except`) and asks again, forever (with `timeout > 0` it interrupts
  the main thread and raises RuntimeError). It also skips samples that are falsy (`0`, `()`).
  Here the loader stops after the last full batch. The stream case reads only full batches.
- `SequentialSampler`/`RandomSampler` with `indices` and `world_size > 1`: MegEngine sizes the
  shards from `len(dataset)`, not from `indices`, and an AssertionError stops it when the
  indices cannot be padded to that size (fewer than half of the dataset's length, or more than
  it); here the shards are cut anyway, and they overlap. Left out, reported.
- `Collator` on numpy byte-string scalars (`np.bytes_`): MegEngine stacks them into an `S`
  array (its check for the name `string_` misses numpy's `bytes_`); here they stay a list, as
  `bytes` do. Inside a sequence sample, a field of strings is a tuple in MegEngine and a list
  here. Left out.
- A `DataLoader` given a sampler of the wrong kind: AssertionError in MegEngine, TypeError here.
- Not compared: random vision transforms through a loader. MegEngine's draw from numpy's global
  generator, in whatever process and order the batches are made; here each batch's transforms
  draw from a generator seeded by the loader's seed and the batch's position, so the same
  pipeline gives other (repeatable) augmentations.

`num_workers=2` runs on MegEngine's side (its venv has pyarrow 11 with plasma); the case checks
the batches equal the `num_workers=0` ones on each side and compares them across sides.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from parity_cases import case


class _Sized:
    """Something with a length: all a map sampler asks of its dataset."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def _epochs(sampler: Any, n: int) -> list:
    return [list(sampler) for _ in range(n)]


def _arrays(n: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (n, 4, 4, 3)).astype(np.uint8)
    labels = rng.randint(0, 10, n).astype(np.int64)
    values = rng.standard_normal(n).astype(np.float64)
    return images, labels, values


def _dataset(n: int = 10) -> Any:
    from megengine.data.dataset import ArrayDataset

    return ArrayDataset(*_arrays(n))


def _batches(loader: Any, limit: int | None = None) -> list:
    """The loader's batches, each with its arrays' dtypes as strings."""
    out = []
    for batch in itertools.islice(loader, limit):
        out.append({"values": list(batch), "dtypes": [str(a.dtype) for a in batch]})
    return out


def _raises(make: Any) -> str:
    try:
        make()
    except Exception as e:  # noqa: BLE001 - the class is the result
        return type(e).__name__
    return "no error"


# ----- samplers ------------------------------------------------------------------------------
@case()
def data_random_sampler_epochs() -> dict:
    from megengine.data import RandomSampler

    out = {}
    for drop_last in (False, True):
        sampler = RandomSampler(_Sized(10), batch_size=3, drop_last=drop_last, seed=7)
        out[f"drop_last={drop_last}"] = {"epochs": _epochs(sampler, 3), "len": len(sampler)}
    one = RandomSampler(_Sized(5), seed=1)
    out["batch_size=1"] = {"epochs": _epochs(one, 2), "len": len(one)}
    return out


@case()
def data_random_sampler_indices() -> dict:
    from megengine.data import RandomSampler

    out = {}
    for name, indices in (("list", [3, 9, 4, 0, 7, 12]), ("tuple", (5, 1, 8)),
                          ("range", range(2, 20, 3))):
        sampler = RandomSampler(_Sized(14), batch_size=2, indices=indices, seed=11)
        out[name] = {"epochs": _epochs(sampler, 2), "len": len(sampler)}
    return out


@case()
def data_random_sampler_ranks() -> dict:
    from megengine.data import RandomSampler

    out = {}
    for world_size, n, batch in ((3, 10, 2), (4, 12, 3), (2, 7, 4)):
        for rank in range(world_size):
            for drop_last in (False, True):
                sampler = RandomSampler(_Sized(n), batch, drop_last, world_size=world_size,
                                        rank=rank, seed=5)
                out[f"{world_size}/{rank}/{drop_last}"] = {"epochs": _epochs(sampler, 2),
                                                            "len": len(sampler)}
        # no seed with several ranks: every rank draws from seed 0
        unseeded = RandomSampler(_Sized(n), batch, world_size=world_size, rank=1)
        out[f"{world_size}/unseeded"] = _epochs(unseeded, 2)
    return out


@case()
def data_sequential_sampler() -> dict:
    from megengine.data import SequentialSampler

    out = {}
    for batch, drop_last in itertools.product((1, 3, 4, 10), (False, True)):
        sampler = SequentialSampler(_Sized(10), batch, drop_last)
        out[f"{batch}/{drop_last}"] = {"batches": list(sampler), "again": list(sampler),
                                       "len": len(sampler)}
    for name, indices in (("list", [8, 1, 5, 2, 9]), ("tuple", (0, 4)), ("range", range(9, 0, -2))):
        sampler = SequentialSampler(_Sized(10), 2, indices=indices)
        out[name] = {"batches": list(sampler), "len": len(sampler)}
    default = SequentialSampler(_Sized(3))
    out["default"] = {"batches": list(default), "len": len(default)}
    return out


@case()
def data_sequential_sampler_ranks() -> dict:
    from megengine.data import SequentialSampler

    out = {}
    for world_size, n, batch in ((3, 10, 2), (4, 10, 3), (2, 8, 4), (5, 5, 1)):
        for rank in range(world_size):
            for drop_last in (False, True):
                sampler = SequentialSampler(_Sized(n), batch, drop_last, world_size=world_size,
                                            rank=rank)
                out[f"{world_size}/{rank}/{drop_last}"] = {"batches": list(sampler),
                                                            "len": len(sampler)}
    # indices that pad to the shards' size (from len(dataset)): at least half of it, at most it
    for rank in range(2):
        sampler = SequentialSampler(_Sized(8), 2, indices=[7, 3, 5, 1, 0], world_size=2,
                                    rank=rank)
        out[f"indices/{rank}"] = list(sampler)
    return out


@case()
def data_replacement_sampler() -> dict:
    from megengine.data import ReplacementSampler

    out = {}
    uniform = ReplacementSampler(_Sized(6), batch_size=4, seed=3)
    out["uniform"] = {"epochs": _epochs(uniform, 3), "len": len(uniform)}
    weighted = ReplacementSampler(_Sized(5), 3, weights=[1, 0, 4, 2.5, 0.5], seed=9)
    out["weights"] = {"epochs": _epochs(weighted, 2), "len": len(weighted)}
    for num_samples, drop_last in ((7, False), (7, True), (20, False)):
        sampler = ReplacementSampler(_Sized(4), 3, drop_last, num_samples=num_samples, seed=2)
        out[f"num_samples={num_samples}/{drop_last}"] = {"epochs": _epochs(sampler, 2),
                                                         "len": len(sampler)}
    for rank in range(3):
        sampler = ReplacementSampler(_Sized(10), 2, num_samples=8, weights=[1.0] * 5 + [3.0] * 5,
                                     world_size=3, rank=rank, seed=4)
        out[f"rank{rank}"] = {"epochs": _epochs(sampler, 2), "len": len(sampler)}
    return out


@case()
def data_infinite_sampler() -> dict:
    from megengine.data import Infinite, RandomSampler, SequentialSampler

    out = {}
    for name, inner in (("sequential", SequentialSampler(_Sized(7), 3)),
                        ("sequential_drop", SequentialSampler(_Sized(7), 3, drop_last=True)),
                        ("random", RandomSampler(_Sized(7), 3, seed=6))):
        sampler = Infinite(inner)
        out[name] = {"first": list(itertools.islice(sampler, 8)),
                     "then": list(itertools.islice(iter(sampler), 3)),
                     "len": len(sampler)}
    sampler = Infinite(RandomSampler(_Sized(9), 4, drop_last=True, world_size=2, rank=1, seed=0))
    out["attributes"] = {"batch_size": sampler.batch_size, "drop_last": sampler.drop_last,
                         "num_samples": sampler.num_samples, "world_size": sampler.world_size,
                         "rank": sampler.rank, "indices": sampler.indices,
                         "state": sampler.rng.get_state()[1][:4]}
    return out


@case()
def data_stream_sampler() -> dict:
    from megengine.data import StreamSampler

    out = {}
    for batch in (1, 3, 5):
        sampler = StreamSampler(batch_size=batch)
        out[str(batch)] = {"first": list(itertools.islice(sampler, 4)),
                           "again": list(itertools.islice(sampler, 2)),
                           "batch_size": sampler.batch_size}
    out["default"] = list(itertools.islice(StreamSampler(), 3))
    return out


@case()
def data_sampler_bad_arguments() -> dict:
    """The exception class each bad argument raises (or 'no error')."""
    from megengine.data import (
        Infinite,
        RandomSampler,
        ReplacementSampler,
        SequentialSampler,
        StreamSampler,
    )

    ds = _Sized(6)
    makers = {
        "batch_size=0": lambda: SequentialSampler(ds, 0),
        "batch_size=-2": lambda: RandomSampler(ds, -2),
        "batch_size=2.0": lambda: SequentialSampler(ds, 2.0),
        "batch_size=True": lambda: RandomSampler(ds, True),
        "batch_size=None": lambda: SequentialSampler(ds, None),
        "drop_last=1": lambda: SequentialSampler(ds, 2, drop_last=1),
        "drop_last=None": lambda: RandomSampler(ds, 2, drop_last=None),
        "drop_last='yes'": lambda: ReplacementSampler(ds, 2, drop_last="yes"),
        "batch_size>len": lambda: SequentialSampler(ds, 7),
        "batch_size>shard": lambda: RandomSampler(ds, 3, world_size=3, rank=0),
        "num_samples<batch_size": lambda: ReplacementSampler(ds, 4, num_samples=3),
        "num_samples=0": lambda: ReplacementSampler(ds, 1, num_samples=0),
        "num_samples=-1": lambda: ReplacementSampler(ds, 1, num_samples=-1),
        "num_samples=2.5": lambda: ReplacementSampler(ds, 1, num_samples=2.5),
        "indices=set": lambda: SequentialSampler(ds, 2, indices={0, 1, 2}),
        "indices=array": lambda: RandomSampler(ds, 2, indices=np.arange(4)),
        "indices=iterator": lambda: SequentialSampler(ds, 2, indices=iter([0, 1])),
        "weights=short": lambda: ReplacementSampler(ds, 2, weights=[1, 2, 3]),
        "weights=long": lambda: ReplacementSampler(ds, 2, weights=[1] * 7),
        "weights=array": lambda: ReplacementSampler(ds, 2, weights=np.ones(6)),
        "len(stream)": lambda: len(StreamSampler(2)),
        "Infinite.sample": lambda: Infinite(SequentialSampler(ds, 2)).sample(),
    }
    return {name: _raises(make) for name, make in makers.items()}


# ----- collator ------------------------------------------------------------------------------
def _described(value: Any) -> Any:
    """`value` with every array beside its dtype (the runner compares dtypes of arrays only)."""
    if isinstance(value, np.ndarray):
        data = value.astype(np.int64) if value.dtype.kind in "mM" else value  # JSON-ready
        return {"stacked": data, "dtype": str(value.dtype), "contiguous":
                bool(value.flags["C_CONTIGUOUS"])}
    if isinstance(value, bytes):
        return {"type": type(value).__name__, "bytes": value.decode()}
    if isinstance(value, dict):
        return {k: _described(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return {"sequence": [_described(v) for v in value]}
    return {"type": type(value).__name__, "value": value}


@case()
def data_collator_tuples() -> dict:
    from megengine.data import Collator

    rng = np.random.RandomState(1)
    samples = [(rng.randint(0, 256, (2, 3)).astype(np.uint8), i, 0.5 * i, np.float32(i / 3),
                f"s{i}", np.int16(-i), np.bool_(i % 2), np.float64(i) / 7)
               for i in range(3)]
    return {"batch": _described(Collator().apply(samples))}


@case()
def data_collator_dicts_and_nesting() -> dict:
    from megengine.data import Collator

    rng = np.random.RandomState(2)
    dicts = [{"image": rng.standard_normal((3, 2)).astype(np.float32), "label": i,
              "name": f"n{i}", "extra": {"w": [1.5 * i, 2.0], "id": np.int32(i)}}
             for i in range(4)]
    nested = [[[np.arange(3, dtype=np.int8) + i, 1 + i], [2.0 * i, "x"]] for i in range(2)]
    lists = [[1, 2, 3], [4, 5, 6]]
    return {"dicts": _described(Collator().apply(dicts)),
            "nested": _described(Collator().apply(nested)),
            "lists": _described(Collator().apply(lists))}


@case()
def data_collator_scalars() -> dict:
    from megengine.data import Collator

    c = Collator()
    inputs = {
        "bool": [True, False, True],
        "np.bool_": [np.bool_(False), np.bool_(True)],
        "int": [1, -2, 3],
        "big int": [2**40, 1],
        "int then float": [1, 2.5],
        "float": [0.25, -1.0],
        "float16": [np.float16(1.5), np.float16(-2)],
        "uint8": [np.uint8(200), np.uint8(3)],
        "int64": [np.int64(-5), np.int64(7)],
        "str": ["a", "bc"],
        "np.str_": [np.str_("a"), np.str_("xyz")],
        "bytes": [b"a", b"bc"],
        "0-d array": [np.array(1.5, np.float32), np.array(2.5, np.float32)],
        "unicode arrays": [np.array(["ab", "c"]), np.array(["d", "ef"])],
        "datetime64": [np.datetime64("2020-01-01"), np.datetime64("2021-06-30")],
    }
    return {name: _described(c.apply(batch)) for name, batch in inputs.items()}


@case()
def data_collator_errors() -> dict:
    from megengine.data import Collator

    c = Collator()
    bad = {
        "object arrays": [np.array([None, 1], dtype=object), np.array([2, 3], dtype=object)],
        "None": [None, None],
        "set": [{1}, {2}],
        "shapes differ": [np.zeros(2), np.zeros(3)],
        "empty": [],
    }
    return {name: _raises(lambda inputs=inputs: c.apply(inputs)) for name, inputs in bad.items()}


# ----- DataLoader ------------------------------------------------------------------------------
@case()
def data_loader_sequential() -> dict:
    from megengine.data import DataLoader, SequentialSampler

    ds, out = _dataset(10), {}
    for batch, drop_last in ((4, False), (4, True), (5, False), (1, True)):
        loader = DataLoader(ds, SequentialSampler(ds, batch, drop_last))
        out[f"{batch}/{drop_last}"] = {"batches": _batches(loader), "len": len(loader)}
    default = DataLoader(ds)
    out["default"] = {"batches": _batches(default), "len": len(default)}
    return out


@case()
def data_loader_random() -> dict:
    from megengine.data import DataLoader, RandomSampler

    ds, out = _dataset(10), {}
    for drop_last in (False, True):
        loader = DataLoader(ds, RandomSampler(ds, 4, drop_last, seed=3))
        out[f"drop_last={drop_last}"] = {"epoch0": _batches(loader), "epoch1": _batches(loader),
                                         "len": len(loader)}
    # an epoch left after two batches: the next begins with a new permutation
    loader = DataLoader(ds, RandomSampler(ds, 3, seed=8))
    out["broken"] = {"part": _batches(loader, 2), "next": _batches(loader)}
    return out


@case()
def data_loader_ranks() -> dict:
    from megengine.data import DataLoader, RandomSampler, SequentialSampler

    ds, out = _dataset(9), {}
    for rank in range(2):
        out[f"sequential{rank}"] = _batches(DataLoader(
            ds, SequentialSampler(ds, 2, world_size=2, rank=rank)))
        out[f"random{rank}"] = _batches(DataLoader(
            ds, RandomSampler(ds, 2, True, world_size=2, rank=rank, seed=1)))
    return out


@case()
def data_loader_infinite() -> dict:
    from megengine.data import DataLoader, Infinite, RandomSampler, SequentialSampler

    ds, out = _dataset(7), {}
    for name, inner in (("sequential", SequentialSampler(ds, 3)),
                        ("random", RandomSampler(ds, 3, seed=2))):
        loader = DataLoader(ds, Infinite(inner))
        # a new iteration goes on where the last one stopped
        out[name] = {"first": _batches(loader, 5), "then": _batches(loader, 3),
                     "len": len(loader)}
    return out


@case()
def data_loader_custom_collator() -> dict:
    from megengine.data import Collator, DataLoader, SequentialSampler

    class Padded(Collator):
        """Stacks the images, pads the labels to 4 with -1, counts the samples."""

        def apply(self, inputs):
            images, labels, values = zip(*inputs)
            padded = np.full(4, -1, np.int64)
            padded[:len(labels)] = labels
            return {"images": np.stack(images), "labels": padded, "n": len(inputs),
                    "mean": np.float64(np.mean(values))}

    ds = _dataset(10)
    loader = DataLoader(ds, SequentialSampler(ds, 4), collator=Padded())
    return {"batches": list(loader), "len": len(loader)}


@case()
def data_loader_custom_transform() -> dict:
    from megengine.data import DataLoader, RandomSampler, SequentialSampler
    from megengine.data.transform import Transform

    class Doubled(Transform):
        def apply(self, sample):
            image, label, value = sample
            return image.astype(np.float32) * 2, label + 1, value * 2

    class Reversed(Transform):
        """A batch transform: the batch's samples in reverse, each image flipped."""

        def apply(self, sample):
            image, label, value = sample
            return image[:, ::-1], label, value

        def apply_batch(self, inputs):
            return tuple(self.apply(s) for s in reversed(inputs))

    ds = _dataset(10)
    return {
        "doubled": _batches(DataLoader(ds, SequentialSampler(ds, 3), transform=Doubled())),
        "doubled_random": _batches(DataLoader(ds, RandomSampler(ds, 4, True, seed=4),
                                              transform=Doubled())),
        "reversed": _batches(DataLoader(ds, SequentialSampler(ds, 4), transform=Reversed())),
    }


@case()
def data_loader_stream() -> dict:
    """Only the stream's full batches are read: MegEngine's loader never ends a stream."""
    from megengine.data import DataLoader, StreamSampler
    from megengine.data.dataset import StreamDataset
    from megengine.data.transform import Transform

    class Finite(StreamDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            rng = np.random.RandomState(5)
            for i in range(self.n):
                yield rng.standard_normal(2).astype(np.float32), np.int64(i), f"item{i}"

    class Scaled(Transform):
        def apply(self, sample):
            x, i, name = sample
            return x * 10, i * 2, name.upper()

    out = {}
    for batch, n_batches in ((3, 3), (1, 4), (4, 2)):
        loader = DataLoader(Finite(10), StreamSampler(batch_size=batch))
        out[f"batch_size={batch}"] = list(itertools.islice(loader, n_batches))
        out[f"again{batch}"] = list(itertools.islice(loader, 1))  # a new pass: from the start
    loader = DataLoader(Finite(9), StreamSampler(3), transform=Scaled())
    out["transform"] = list(itertools.islice(loader, 3))
    out["default_sampler"] = list(itertools.islice(DataLoader(Finite(5)), 3))
    out["len"] = _raises(lambda: len(DataLoader(Finite(5), StreamSampler(2))))
    return out


@case()
def data_loader_two_workers() -> dict:
    """Two worker processes give the batches, in order, of the loader's own process."""
    from megengine.data import DataLoader, RandomSampler, SequentialSampler

    ds, out = _dataset(11), {}
    for name, make in (("sequential", lambda: SequentialSampler(ds, 3)),
                       ("random", lambda: RandomSampler(ds, 4, True, seed=12))):
        serial = _batches(DataLoader(ds, make(), num_workers=0))
        parallel = _batches(DataLoader(ds, make(), num_workers=2))
        same = len(serial) == len(parallel) and all(
            all(np.array_equal(a, b) for a, b in zip(s["values"], p["values"]))
            for s, p in zip(serial, parallel))
        out[name] = {"batches": parallel, "same_as_serial": same}
    return out


@case()
def data_loader_bad_arguments() -> dict:
    from megengine.data import DataLoader

    ds = _dataset(4)
    return {"num_workers=-1": _raises(lambda: DataLoader(ds, num_workers=-1)),
            "timeout=-1": _raises(lambda: DataLoader(ds, timeout=-1))}
