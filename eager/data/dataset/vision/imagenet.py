"""`ImageNet`: the ILSVRC2012 classification images, read from their extracted class folders."""

from __future__ import annotations

import os
from typing import Any

from ....core.errors import CheckpointError
from ....serialization import load, save
from ...errors import DatasetNotFoundError
from .folder import ImageFolder
from .meta_vision import PathLike, default_root

_LAYOUT = ("root/train/<wnid>/<image> for train=True, root/val/<wnid>/<image> for train=False "
           "(the validation images sorted into class folders), and the devkit extracted as "
           "root/ILSVRC2012_devkit_t12/")


class ImageNet(ImageFolder):
    """ImageNet as MegEngine reads it: an `ImageFolder` over `root/train` (`train=True`) or
    `root/val`, whose class folders (the WordNet ids, `n01440764`, ...) are numbered in sorted
    order; an item is `(image, label)`, the image as OpenCV decodes it (HxWx3 uint8, BGR) and the
    label its class's index as a numpy int32 (its folder's name with `class_name=True`).

    As in MegEngine, `root` must also hold the devkit's folder `ILSVRC2012_devkit_t12/` (it may be
    empty until `meta` or `valid_ground_truth` is read), and `root` defaults to
    `$XDG_CACHE_HOME/eager/data/ImageNet`. MegEngine extracts the ILSVRC archives
    (`ILSVRC2012_img_train.tar`, ...) when the folders are missing; here a missing folder raises
    `DatasetNotFoundError` saying the layout to extract them to, archives or not.
    After construction `root` is the split's folder, as MegEngine's `ImageFolder` sets it.
    """

    raw_file_meta = {
        "train": ("ILSVRC2012_img_train.tar", "1d675b47d978889d74fa0da5fadfb00e"),
        "val": ("ILSVRC2012_img_val.tar", "29b22e2961454d5413ddabcf34fc5622"),
        "devkit": ("ILSVRC2012_devkit_t12.tar.gz", "fa75699e90414af021442c21a62c3abf"),
    }
    """The distribution's archives and their md5 sums, as MegEngine lists them."""
    default_train_dir = "train"
    default_val_dir = "val"
    default_devkit_dir = "ILSVRC2012_devkit_t12"

    def __init__(self, root: PathLike | None = None, train: bool = True, **kwargs: Any) -> None:
        base = os.path.expanduser(os.fspath(root)) if root is not None else self._default_root
        if not os.path.isdir(base):
            raise DatasetNotFoundError(f"ImageNet: the directory {base} does not exist; it "
                                       f"should hold {_LAYOUT}")
        self.devkit_dir = os.path.join(base, self.default_devkit_dir)
        self.train = train
        split = self.default_train_dir if train else self.default_val_dir
        self.target_folder = os.path.join(base, split)
        for folder in (self.devkit_dir, self.target_folder):
            if not os.path.isdir(folder):
                raise self._missing(base, folder)
        self._base = base
        super().__init__(self.target_folder, **kwargs)

    def _missing(self, base: str, folder: str) -> DatasetNotFoundError:
        """The error for `folder` missing under `base`, saying whether archives are there."""
        archives = [name for name, _ in self.raw_file_meta.values()
                    if os.path.exists(os.path.join(base, name))]
        found = (f"{', '.join(archives)} are in {base}, but archives are not extracted here "
                 "(MegEngine extracts them): extract them yourself" if archives
                 else "extract the ILSVRC2012 archives")
        return DatasetNotFoundError(f"ImageNet: {folder} does not exist; {found} so that "
                                    f"{base} holds {_LAYOUT}")

    @property
    def _default_root(self) -> str:
        return default_root(type(self).__name__)

    def check_raw_file(self) -> bool:
        """Whether all three ILSVRC2012 archives are in the dataset's root."""
        return all(os.path.exists(os.path.join(self._base, name))
                   for name, _ in self.raw_file_meta.values())

    @property
    def valid_ground_truth(self) -> list[int]:
        """The validation images' class ids (ILSVRC2012 ids, 1-based, in image order) from the
        devkit's `data/ILSVRC2012_validation_ground_truth.txt`."""
        path = os.path.join(self.devkit_dir, "data", "ILSVRC2012_validation_ground_truth.txt")
        if not os.path.isfile(path):
            raise DatasetNotFoundError(f"ImageNet: valid ground truth file {path} does not "
                                       "exist; extract ILSVRC2012_devkit_t12.tar.gz in "
                                       f"{self._base}")
        with open(path) as f:
            return [int(line) for line in f if line.strip()]

    @property
    def meta(self) -> tuple[dict[int, str], dict[str, tuple[str, ...]]]:
        """`(idx_to_wnid, wnid_to_classes)` of the 1000 leaf classes: ILSVRC2012 id -> WordNet
        id, and WordNet id -> its class names. Read from the devkit's `meta.pkl`, or made from
        its `data/meta.mat` (which needs scipy) and cached as `meta.pkl`, as MegEngine does."""
        cached = os.path.join(self.devkit_dir, "meta.pkl")
        if os.path.isfile(cached):
            return load(cached)
        meta = _read_meta_mat(os.path.join(self.devkit_dir, "data", "meta.mat"))
        save(meta, cached)
        return meta


def _read_meta_mat(path: str) -> tuple[dict[int, str], dict[str, tuple[str, ...]]]:
    """The leaf synsets of the devkit's `meta.mat` as `(idx_to_wnid, wnid_to_classes)`."""
    if not os.path.isfile(path):
        raise DatasetNotFoundError(f"ImageNet: meta file {path} does not exist; extract "
                                   "ILSVRC2012_devkit_t12.tar.gz next to the train and val "
                                   "folders")
    try:
        import scipy.io  # type: ignore[import-untyped]  # optional: only meta.mat
    except ImportError as e:
        raise ImportError("ImageNet.meta reads the devkit's meta.mat with scipy, which is not "
                          "installed: pip install scipy") from e
    try:
        synsets = scipy.io.loadmat(path, squeeze_me=True)["synsets"]
    except (ValueError, KeyError, OSError) as e:
        raise CheckpointError(f"ImageNet: {path} is not the devkit's meta.mat ({e})") from None
    # a synset row is (ILSVRC2012 id, wnid, words, gloss, num_children, ...); the 1000 classes
    # are the leaves
    leaves = [row for row in synsets if int(row[4]) == 0]
    idx_to_wnid = {int(row[0]): str(row[1]) for row in leaves}
    wnid_to_classes = {str(row[1]): tuple(str(row[2]).split(", ")) for row in leaves}
    return idx_to_wnid, wnid_to_classes
