"""Data loading with MegEngine's `megengine.data` API: a `DataLoader` over a dataset, a sampler,
per-sample transforms (`eager.data.transform`, usually imported as `T`) and a collator.

    from eager.data import DataLoader, RandomSampler
    from eager.data.dataset import ArrayDataset
    import eager.data.transform as T

A MegEngine script's data pipeline runs after changing `megengine` to `eager` in its imports.
Beyond MegEngine: with a seed, batches and augmentations repeat whatever `num_workers` is, and
`DataLoader.state_dict()` saves the loader's position so a resumed run continues where it was.
"""

from . import dataset, transform
from .collator import Collator
from .dataloader import DataLoader
from .dataset import (
                      CIFAR10,
                      CIFAR100,
                      MNIST,
                      ArrayDataset,
                      ConcatDataset,
                      Dataset,
                      ImageFolder,
                      StreamDataset,
)
from .errors import (
                     DataLoaderError,
                     DataLoaderTimeoutError,
                     DatasetNotFoundError,
                     StreamDatasetError,
                     WorkerTraceback,
)
from .fetch import WorkerInfo, get_worker_info
from .sample_rng import rng
from .sampler import (
                      Infinite,
                      MapSampler,
                      RandomSampler,
                      ReplacementSampler,
                      Sampler,
                      SequentialSampler,
                      StreamSampler,
)

__all__ = [
    "CIFAR10", "CIFAR100", "MNIST", "ArrayDataset", "Collator", "ConcatDataset", "DataLoader",
    "DataLoaderError", "DataLoaderTimeoutError", "Dataset", "DatasetNotFoundError", "ImageFolder",
    "Infinite", "MapSampler", "RandomSampler", "ReplacementSampler",
    "Sampler", "SequentialSampler", "StreamDataset", "StreamDatasetError", "StreamSampler",
    "WorkerInfo",
    "WorkerTraceback", "dataset", "get_worker_info", "rng", "transform",
]
