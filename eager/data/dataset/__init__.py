"""Datasets, as in MegEngine's `megengine.data.dataset`: the map-style `Dataset` and iterable
`StreamDataset` a `DataLoader` reads, `ArrayDataset` and `ConcatDataset`, and the image datasets
of `vision` (`ImageFolder`, `ImageNet`, `MNIST`, `CIFAR10`, `CIFAR100`; the detection datasets
`COCO`, `Objects365`, `PascalVOC`), which read files already on disk and never download."""

from .meta_dataset import ArrayDataset as ArrayDataset
from .meta_dataset import ConcatDataset as ConcatDataset
from .meta_dataset import Dataset as Dataset
from .meta_dataset import StreamDataset as StreamDataset
from .vision import CIFAR10 as CIFAR10
from .vision import CIFAR100 as CIFAR100
from .vision import COCO as COCO
from .vision import MNIST as MNIST
from .vision import ImageFolder as ImageFolder
from .vision import ImageNet as ImageNet
from .vision import Objects365 as Objects365
from .vision import PascalVOC as PascalVOC
from .vision import VisionDataset as VisionDataset

__all__ = ["CIFAR10", "CIFAR100", "MNIST", "ArrayDataset", "ConcatDataset", "Dataset",
           "ImageFolder", "ImageNet", "StreamDataset", "VisionDataset", "COCO", "Objects365",
           "PascalVOC"]
