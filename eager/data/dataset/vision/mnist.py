"""`MNIST`: the handwritten digits, read from the four gzip'd IDX files of its distribution."""

from __future__ import annotations

import gzip
import math
import os

import numpy as np

from ....core.errors import CheckpointError
from .meta_vision import PathLike, VisionDataset, default_root, not_found

_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049  # IDX: uint8 data, 3 and 1 dimensions


class MNIST(VisionDataset):
    """The MNIST digits: 60,000 training and 10,000 test images of 28x28 pixels.

    An item is `(image, label)`: a 28x28x1 uint8 image and its digit as a numpy int32. The files
    are read from `root`, by default `$XDG_CACHE_HOME/eager/data/MNIST` (`~/.cache/eager/data/
    MNIST` when that is unset): `train-images-idx3-ubyte.gz` and `train-labels-idx1-ubyte.gz`
    for `train=True`, `t10k-images-idx3-ubyte.gz` and `t10k-labels-idx1-ubyte.gz` otherwise,
    still gzip'd, as distributed at `url_path`. Nothing is downloaded here: `download` is
    accepted for MegEngine's signature, and missing files raise `DatasetNotFoundError`, which
    says where to get them. `meta` is the files' IDX headers.
    """

    url_path = "https://ossci-datasets.s3.amazonaws.com/mnist/"
    raw_file_name = [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ]

    def __init__(self, root: PathLike | None = None, train: bool = True,
                 download: bool = True) -> None:
        super().__init__(default_root(type(self).__name__) if root is None else root,
                         order=("image", "image_category"))
        names = self.raw_file_name[:2] if train else self.raw_file_name[2:]
        paths = [os.path.join(self.root, name) for name in names]
        if not all(os.path.isfile(path) for path in paths):
            raise not_found("MNIST", names, self.root,
                            f"them from {self.url_path} (e.g. {self.url_path}{names[0]})")
        image_header, images = _read_idx(paths[0], _IMAGES_MAGIC, 3)
        label_header, labels = _read_idx(paths[1], _LABELS_MAGIC, 1)
        if len(images) != len(labels):
            raise CheckpointError(f"MNIST: {paths[0]} holds {len(images)} images but "
                                  f"{paths[1]} {len(labels)} labels")
        self._meta_data = {
            "images": dict(zip(("magic", "imgs", "height", "width"), image_header)),
            "labels": dict(zip(("magic", "imgs"), label_header)),
        }
        self.arrays = (images[..., None], labels.astype(np.int32))

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int32]:
        return self.arrays[0][index], self.arrays[1][index]

    def __len__(self) -> int:
        return len(self.arrays[0])

    @property
    def meta(self) -> dict[str, dict[str, int]]:
        """The IDX headers: `{"images": {"magic", "imgs", "height", "width"}, "labels":
        {"magic", "imgs"}}`."""
        return self._meta_data


def _read_idx(path: str, magic: int, ndim: int) -> tuple[list[int], np.ndarray]:
    """The header (magic number, then each dimension) and the uint8 data of an IDX file."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (gzip.BadGzipFile, EOFError) as e:
        raise CheckpointError(f"MNIST: {path} is not a complete gzip file ({e}); download "
                              "it again") from None
    size = 4 * (1 + ndim)
    header = [int(v) for v in np.frombuffer(raw[:size], ">i4")] if len(raw) >= size else []
    if len(header) != 1 + ndim or header[0] != magic:
        raise CheckpointError(f"MNIST: {path} is not an IDX file of {ndim}-d uint8 data "
                              f"(its header should start with the magic number {magic})")
    shape = tuple(header[1:])
    if len(raw) - size != math.prod(shape):
        raise CheckpointError(f"MNIST: {path} declares data of shape {shape} but holds "
                              f"{len(raw) - size} bytes; the file is truncated or corrupt")
    return header, np.frombuffer(raw, np.uint8, offset=size).reshape(shape).copy()
