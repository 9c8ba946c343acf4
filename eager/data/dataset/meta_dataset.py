"""The dataset kinds a `DataLoader` reads (MegEngine's `megengine.data.dataset.meta_dataset`):
map-style (`Dataset`: an item per index, a length)
and iterable (`StreamDataset`: items as they come), and two map-style containers.

A loader pickles its dataset to each worker process, so a dataset should hold what is cheap to
pickle (arrays, file paths), not open files or decoded images.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import StreamDatasetError


class Dataset(ABC):
    """A map-style dataset: `dataset[i]` is the i-th item, `len(dataset)` how many there are.

    Items are usually tuples of numpy arrays (image, label, ...); a `DataLoader` asks its
    sampler for indices and collates the items into batches. Unlike MegEngine, a subclass need
    not define `__init__` (there it is abstract too).
    """

    @abstractmethod
    def __getitem__(self, index: int) -> Any:
        """The item at `index`."""

    @abstractmethod
    def __len__(self) -> int:
        """How many items there are."""


class StreamDataset(Dataset):
    """An iterable dataset: items come from `__iter__`, in the order it yields them, and there is
    no length or indexing (both raise `StreamDatasetError`: an `AssertionError` as in MegEngine,
    and a `TypeError`)."""

    @abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """The items, one at a time."""

    def __getitem__(self, index: int) -> Any:
        raise StreamDatasetError(f"{type(self).__name__} is a StreamDataset: it has no items "
                                 "by index; iterate over it instead")

    def __len__(self) -> int:
        raise StreamDatasetError(f"{type(self).__name__} is a StreamDataset: it has no length")


class ArrayDataset(Dataset):
    """Rows of one or more arrays of the same length: item i is `(arrays[0][i], arrays[1][i],
    ...)`, e.g. `ArrayDataset(images, labels)[i] == (images[i], labels[i])`.

    >>> import numpy as np
    >>> ds = ArrayDataset(np.zeros((3, 2)), np.arange(3))
    >>> len(ds), int(ds[2][1])
    (3, 2)
    """

    def __init__(self, *arrays: Sequence[Any]) -> None:
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array, e.g. "
                             "ArrayDataset(images, labels)")
        lengths = [len(array) for array in arrays]
        if len(set(lengths)) > 1:
            raise ValueError(f"lengths of input arrays are inconsistent: {lengths}; each array "
                             "needs one row per sample")
        self.arrays = arrays

    def __getitem__(self, index: int) -> tuple:
        return tuple(array[index] for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])


class ConcatDataset(Dataset):
    """Map-style datasets one after the other: the items of `datasets[0]`, then those of
    `datasets[1]`, and so on."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset needs at least one dataset")
        for d in self.datasets:
            if isinstance(d, StreamDataset):
                raise TypeError(f"ConcatDataset joins map-style datasets; {type(d).__name__} is "
                                "a StreamDataset, which has no length or indexing")
        self.cumulative_sizes: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __getitem__(self, index: int) -> Any:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for a ConcatDataset of {n} items")
        if index < 0:
            index += n
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]
