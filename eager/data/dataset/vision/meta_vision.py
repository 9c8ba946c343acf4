"""What the image datasets share: `VisionDataset` (a root and the `order` of an item's fields),
where a dataset's files go by default, the error for files that are not there, and reading an
image file. (The module's name is MegEngine's, so `megengine.data.dataset.vision.meta_vision`
imports port unchanged.)"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ....core.errors import CheckpointError
from ...errors import DatasetNotFoundError
from ..meta_dataset import Dataset

PathLike = str | os.PathLike[str]


def default_root(name: str) -> str:
    """Where dataset `name` (a class name: "MNIST", "CIFAR10") looks when given no root:
    `$XDG_CACHE_HOME/eager/data/<name>`, `~/.cache/eager/data/<name>` when that is unset
    (MegEngine's rule, which uses `.../megengine/<name>`)."""
    cache = os.getenv("XDG_CACHE_HOME") or "~/.cache"
    return os.path.expanduser(os.path.join(cache, "eager", "data", name))


def not_found(dataset: str, files: Sequence[str], root: str, source: str) -> DatasetNotFoundError:
    """The error for `dataset`'s `files` missing from `root`; `source` says where to get
    them."""
    where = root if os.path.isdir(root) else f"{root} (the directory does not exist)"
    return DatasetNotFoundError(
        f"{dataset}: {', '.join(files)} not found in {where}. Datasets are never downloaded "
        f"here (download=True changes nothing): download {source}, put the files, as they are, "
        f"in {root}, or pass root= the directory that holds them")


def read_image(dataset: str, path: str, flags: int = cv2.IMREAD_COLOR) -> np.ndarray:
    """The image file at `path` as `cv2.imread(path, flags)` decodes it (by default HxWx3 uint8,
    channels in BGR order), whatever its name's extension says; `dataset` names the dataset in
    the errors: `DatasetNotFoundError` for a missing file, `CheckpointError` for one OpenCV
    cannot decode (where `cv2.imread` itself returns None)."""
    image = cv2.imread(path, flags)
    if image is None:
        if not os.path.isfile(path):
            raise DatasetNotFoundError(f"{dataset}: {path} not found; the dataset's listing or "
                                       "annotations name it: put the file back, or pass the "
                                       "root= that holds it")
        raise CheckpointError(f"{dataset}: OpenCV cannot decode {path} as an image; replace it "
                              "with an intact copy")
    return np.asarray(image)


class VisionDataset(Dataset):
    """Base of the image datasets: `root`, the directory they read (`~` expanded), and `order`,
    the names of an item's fields ("image", "image_category", ...), which a subclass checks
    against the ones it can give (`supported_order`)."""

    def __init__(self, root: PathLike | None, *, order: Sequence[str] | None = None,
                 supported_order: Sequence[str] | None = None) -> None:
        self.root: Any = os.path.expanduser(os.fspath(root)) if root is not None else None
        if order is None:
            order = ("image",)
        if not isinstance(order, Sequence):
            raise ValueError(f"order should be a sequence of field names, but got order={order}")
        if supported_order is not None:
            for key in order:
                if key not in supported_order:
                    raise NotImplementedError(f"{key} is unsupported data type; "
                                              f"{type(self).__name__} gives {supported_order}")
        self.order = order

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} defines no __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} defines no __len__")
