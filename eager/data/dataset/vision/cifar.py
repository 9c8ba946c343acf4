"""`CIFAR10` and `CIFAR100`: 32x32 colour images, read from the "python version" archives.

Note [CIFAR batches are data]: the archives hold Python 2 pickles of dicts (bytes keys, a uint8
numpy array, lists of ints and bytes). Unpickling runs whatever globals a file names, so they
are read with `_BatchUnpickler`, which admits only the numpy globals that rebuild arrays (the
stand-ins of `eager.serialization.pickle_reader`) and raises `CheckpointError` for anything
else. Archives are read member by member, never extracted, so nothing is written anywhere.
"""

from __future__ import annotations

import io
import os
import pickle
import posixpath
import tarfile
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ....core.errors import CheckpointError
from ....serialization.pickle_reader import GLOBALS, _Dtype, finish, load
from ...errors import DatasetNotFoundError
from .meta_vision import PathLike, VisionDataset, default_root, not_found


class CIFAR10(VisionDataset):
    """CIFAR-10: 50,000 training and 10,000 test 32x32 colour images in 10 classes.

    An item is `(image, label)`: a 32x32x3 uint8 image, channels in BGR order (as OpenCV
    gives), and its class as a numpy int32; `meta` is the archive's `batches.meta` dict (bytes
    keys; `meta[b"label_names"]` the class names). The data is read from `root`, by default
    `$XDG_CACHE_HOME/eager/data/CIFAR10` (`~/.cache/eager/data/CIFAR10` when that is unset):
    the extracted folder `cifar-10-batches-py` if it is there, otherwise the archive
    `cifar-10-python.tar.gz` as downloaded from `url_path`. Nothing is downloaded here:
    `download` and `timeout` are accepted for MegEngine's signature, and missing files raise
    `DatasetNotFoundError`, which says where to get them.
    """

    url_path = "https://www.cs.toronto.edu/~kriz/"
    raw_file_name = "cifar-10-python.tar.gz"
    raw_file_dir = "cifar-10-batches-py"
    train_batch = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4",
                   "data_batch_5"]
    test_batch = ["test_batch"]
    meta_info = {"name": "batches.meta"}
    label_keys: ClassVar[tuple[bytes, ...]] = (b"labels",)

    def __init__(self, root: PathLike | None = None, train: bool = True, download: bool = True,
                 timeout: int = 500) -> None:
        super().__init__(default_root(type(self).__name__) if root is None else root,
                         order=("image", "image_category"))
        self.timeout = timeout
        self.target_file = os.path.join(self.root, self.raw_file_dir)
        names = self.train_batch if train else self.test_batch
        self.arrays = self._to_arrays(names, self._load(names))
        self._meta: Any = None

    def __getitem__(self, index: int) -> tuple:
        return tuple(array[index] for array in self.arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    @property
    def meta(self) -> dict:
        """The archive's meta dict (class names and counts), read on first use."""
        if self._meta is None:
            self._meta = self._load([self.meta_info["name"]])[self.meta_info["name"]]
        return self._meta

    def _load(self, names: Sequence[str]) -> dict[str, Any]:
        """Each of the files `names` of the extracted folder or the archive, unpickled."""
        kind, source = type(self).__name__, f"{self.url_path}{self.raw_file_name}"
        if os.path.isdir(self.target_file):
            missing = [n for n in names if not os.path.isfile(os.path.join(self.target_file, n))]
            if missing:
                raise not_found(kind, missing, self.target_file, f"{source} and extract it")
            return {n: _unpickle(_read_file(os.path.join(self.target_file, n)),
                                 os.path.join(self.target_file, n)) for n in names}
        archive = os.path.join(self.root, self.raw_file_name)
        if not os.path.isfile(archive):
            raise not_found(kind, [f"{self.raw_file_name} (or the folder {self.raw_file_dir} "
                                   "extracted from it)"], self.root, source)
        members = _read_members(archive, [f"{self.raw_file_dir}/{n}" for n in names])
        return {n: _unpickle(members[f"{self.raw_file_dir}/{n}"],
                             f"{archive}:{self.raw_file_dir}/{n}") for n in names}

    def _to_arrays(self, names: Sequence[str], batches: dict[str, Any]
                   ) -> tuple[np.ndarray, ...]:
        """(images NxHxWxC BGR, one int32 array per label key) of the batches `names`."""
        images, labels = [], []
        for name in names:
            batch, where = batches[name], f"{type(self).__name__}: {self.raw_file_dir}/{name}"
            data = batch.get(b"data") if isinstance(batch, dict) else None
            if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
                    and data.shape[1] == 3 * 32 * 32):
                raise CheckpointError(f"{where} is not a CIFAR batch: a dict whose b'data' is a "
                                      "uint8 array of shape (N, 3072)")
            images.append(data)
            labels.append([_labels(batch.get(key), len(data), f"{where}[{key!r}]")
                           for key in self.label_keys])
        hwc = np.concatenate(images).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return (np.ascontiguousarray(hwc[..., ::-1]),
                *(np.concatenate(column).astype(np.int32) for column in zip(*labels)))


class CIFAR100(CIFAR10):
    """CIFAR-100: 50,000 training and 10,000 test 32x32 colour images in 100 classes grouped
    into 20 superclasses.

    An item is `(image, fine_label, coarse_label)`: the image as in `CIFAR10`, its class and its
    superclass as numpy int32 (`order` is still `("image", "image_category")`, as in MegEngine);
    `meta` is the archive's `meta` dict (`meta[b"fine_label_names"]`,
    `meta[b"coarse_label_names"]`). Files as in `CIFAR10`, named `cifar-100-python.tar.gz` and
    `cifar-100-python`, by default in `$XDG_CACHE_HOME/eager/data/CIFAR100`.
    """

    raw_file_name = "cifar-100-python.tar.gz"
    raw_file_dir = "cifar-100-python"
    train_batch = ["train"]
    test_batch = ["test"]
    meta_info = {"name": "meta"}
    label_keys = (b"fine_labels", b"coarse_labels")


def _labels(values: Any, n: int, where: str) -> np.ndarray:
    labels = np.asarray(values if isinstance(values, (list, np.ndarray)) else None)
    if labels.shape != (n,) or (n and labels.dtype.kind not in "iu"):
        raise CheckpointError(f"{where} should be a list of {n} integer labels, one per image; "
                              f"it is a {type(values).__name__}")
    return labels


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _read_members(archive: str, names: Sequence[str]) -> dict[str, bytes]:
    """The contents of the regular files `names` of a tar archive, read in one pass."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = posixpath.normpath(member.name)
                if name in names and name not in found and member.isfile():
                    f = tar.extractfile(member)
                    found[name] = f.read() if f is not None else b""
                    if len(found) == len(names):
                        break
    except (tarfile.TarError, EOFError, OSError) as e:
        raise CheckpointError(f"{archive} is not a complete tar.gz archive ({e}); download it "
                              "again") from None
    missing = [posixpath.basename(n) for n in names if n not in found]
    if missing:
        raise DatasetNotFoundError(f"{archive} has no {', '.join(missing)} in its folder "
                                   f"{posixpath.dirname(names[0])}/: it is not the python "
                                   "version of the dataset, or it is damaged")
    return found


# ----- reading the pickles as data (Note [CIFAR batches are data]) -----------------------------
def _text(value: Any) -> Any:
    return value.decode("latin1") if isinstance(value, bytes) else value


class _Py2Dtype(_Dtype):
    """`numpy.dtype` as a Python 2 pickle gives it when read with `encoding="bytes"`: its name
    and byte-order code arrive as bytes."""

    def __init__(self, name: Any, align: Any = False, copy: Any = True):
        super().__init__(_text(name), align, copy)

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(tuple(map(_text, state)) if isinstance(state, tuple) else state)


_ADMITTED: dict[tuple[str, str], Any] = {
    **{key: value for key, value in GLOBALS.items() if key[0].startswith("numpy")},
    ("numpy", "dtype"): _Py2Dtype,
    ("_codecs", "encode"): GLOBALS[("_codecs", "encode")],  # bytes, as Python 3's protocol 2
}


class _BatchUnpickler(pickle.Unpickler):
    """Admits the globals of `_ADMITTED` only; Python 2 strings are read as bytes (the batches'
    keys, raw array data), as MegEngine reads them."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data), encoding="bytes")

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ADMITTED[(module, name)]
        except KeyError:
            raise CheckpointError(
                f"the pickle names the Python global {module}.{name}, which a CIFAR batch never "
                "does; it is refused, not imported or called (batches are read as data)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointError("the pickle refers to an outside object (a persistent id), which "
                              "a CIFAR batch never does")


def _unpickle(data: bytes, where: str) -> Any:
    try:
        return finish(load(_BatchUnpickler(data)))
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as e:
        raise CheckpointError(f"{where} is not a readable pickle ({type(e).__name__}: {e}); "
                              "download the archive again") from None
