"""Parity cases for `megengine.data.dataset`: ArrayDataset, ConcatDataset, VisionDataset's
`order`, and ImageFolder, MNIST, CIFAR10 and CIFAR100 read from small files each case writes in
the dataset's real format to a fresh temporary folder (the same bytes on both sides; PNG, BMP
and PPM images, so that decoding is exact). MNIST and CIFAR are made with `download=False`:
MegEngine would otherwise try to download.

MegEngine behaviour measured here and deliberately not copied (so left out of the cases):
- `Dataset.__init__` is abstract in MegEngine: a subclass that defines only `__getitem__` and
  `__len__` cannot be made (TypeError). Here it can.
- `ArrayDataset()` with no arrays is made, then `len` raises IndexError; here it raises
  ValueError at once. `ConcatDataset` raises ValueError for a negative index past the start
  and IndexError for one past the end; here both raise IndexError (which also ends
  `for item in dataset`). `StreamDataset`'s `len` and indexing raise AssertionError in
  MegEngine, TypeError here.
- `ImageFolder` gives `(None, label)` for a file with an image extension that OpenCV cannot
  decode; here it raises. `ImageFolder("~/images")` expands `~` for the samples but not for
  the class listing, which raises FileNotFoundError; here `~` is expanded throughout.
- `CIFAR10(root)` (download=True, the default) with an archive in `root` that is not the
  official one (md5) deletes the archive and raises RuntimeError; MegEngine extracts archives
  with `extractall` (members may write outside `root`) and unpickles batches and `meta` with
  `pickle.load` (a batch file can run code). Here nothing is downloaded, deleted or extracted:
  archives are read member by member and pickles through a restricted unpickler.
- MegEngine's MNIST needs all four files even for one split; here only that split's two.
  MegEngine makes the root folder (`~/.cache/megengine/<Name>` by default) when it is missing;
  here nothing is made and missing files raise DatasetNotFoundError, whose message says where
  to download them (the default folder is `~/.cache/eager/data/<Name>`).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import pickle
import shutil
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
from parity_cases import case


@contextlib.contextmanager
def _folder() -> Iterator[str]:
    root = tempfile.mkdtemp()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _pixels(seed: int, *shape: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, shape).astype(np.uint8)


# ----- containers ---------------------------------------------------------------------------------
@case()
def array_dataset_rows() -> dict:
    from megengine.data.dataset import ArrayDataset

    x, y = np.arange(24, dtype="float32").reshape(4, 2, 3), np.arange(4, dtype="int32") * 7
    ds = ArrayDataset(x, y)
    return {"len": len(ds), "items": [list(ds[i]) for i in range(4)], "last": list(ds[-1])}


@case()
def array_dataset_unequal_lengths_raises() -> dict:
    from megengine.data.dataset import ArrayDataset

    return {"len": len(ArrayDataset(np.zeros(3), np.zeros(2)))}


@case()
def concat_dataset_items() -> dict:
    from megengine.data.dataset import ArrayDataset, ConcatDataset

    parts = [ArrayDataset(np.arange(3) * 1.5), ArrayDataset(np.arange(0.0)),
             ArrayDataset(np.arange(2) + 10.0)]
    ds = ConcatDataset(parts)
    return {"len": len(ds), "sizes": ds.cumulative_sizes,
            "items": [ds[i][0] for i in range(-5, 5)]}


@case()
def concat_dataset_index_past_the_end_raises() -> dict:
    from megengine.data.dataset import ArrayDataset, ConcatDataset

    return {"item": ConcatDataset([ArrayDataset(np.arange(3))])[3]}


@case()
def vision_dataset_order() -> dict:
    from megengine.data.dataset import VisionDataset

    default = VisionDataset("somewhere")
    named = VisionDataset("r", order=["image", "boxes"], supported_order=("image", "boxes"))
    return {"default": list(default.order), "named": list(named.order), "root": default.root}


@case()
def vision_dataset_unsupported_order_raises() -> dict:
    from megengine.data.dataset import VisionDataset

    return {"order": list(VisionDataset("r", order=("mask",), supported_order=("image",)).order)}


# ----- ImageFolder --------------------------------------------------------------------------------
def _write_images(root: str) -> None:
    """Class folders b_dogs, a_cats (with a nested folder), empty; images in PNG, BMP (upper
    case), PPM and grayscale PNG; a text file and an image outside any class folder."""
    import cv2

    for name in ("b_dogs", "a_cats", os.path.join("a_cats", "inner"), "empty"):
        os.mkdir(os.path.join(root, name))
    cv2.imwrite(os.path.join(root, "b_dogs", "2.png"), _pixels(0, 5, 4, 3))
    cv2.imwrite(os.path.join(root, "b_dogs", "1.BMP"), _pixels(1, 3, 6, 3))
    cv2.imwrite(os.path.join(root, "a_cats", "z.ppm"), _pixels(2, 4, 4, 3))
    cv2.imwrite(os.path.join(root, "a_cats", "gray.png"), _pixels(3, 4, 5))
    cv2.imwrite(os.path.join(root, "a_cats", "inner", "c.png"), _pixels(4, 2, 2, 3))
    cv2.imwrite(os.path.join(root, "stray.png"), _pixels(5, 2, 2, 3))
    with open(os.path.join(root, "a_cats", "readme.txt"), "w") as f:
        f.write("not an image")


def _samples(ds: Any, root: str) -> list:
    return [[os.path.relpath(path, root), label] for path, label in ds.samples]


@case()
def image_folder_items() -> dict:
    from megengine.data.dataset import ImageFolder

    with _folder() as root:
        _write_images(root)
        ds = ImageFolder(root)
        return {"len": len(ds), "classes": ds.class_dict, "samples": _samples(ds, root),
                "items": [list(ds[i]) for i in range(len(ds))], "order": list(ds.order)}


@case()
def image_folder_class_names_and_check_function() -> dict:
    from megengine.data.dataset import ImageFolder

    with _folder() as root:
        _write_images(root)
        ds = ImageFolder(root, check_valid_func=lambda p: p.endswith(".png"), class_name=True)
        return {"len": len(ds), "samples": _samples(ds, root),
                "items": [list(ds[i]) for i in range(len(ds))]}


@case()
def image_folder_jpeg_shape() -> dict:
    import cv2
    from megengine.data.dataset import ImageFolder

    with _folder() as root:
        os.mkdir(os.path.join(root, "a"))
        cv2.imwrite(os.path.join(root, "a", "x.JPEG"), _pixels(6, 16, 8, 3))
        image, label = ImageFolder(root)[0]
        return {"shape": list(image.shape), "dtype": str(image.dtype), "label": label}


@case()
def image_folder_missing_root_raises() -> dict:
    from megengine.data.dataset import ImageFolder

    with _folder() as root:
        return {"len": len(ImageFolder(os.path.join(root, "absent")))}


# ----- MNIST --------------------------------------------------------------------------------------
def _write_mnist(root: str) -> None:
    """The four gzip'd IDX files: 5 training and 3 test images of 28x28 noise."""
    for prefix, n, seed in (("train", 5, 0), ("t10k", 3, 1)):
        with gzip.open(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">iiii", 2051, n, 28, 28) + _pixels(seed, n, 28, 28).tobytes())
        with gzip.open(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">ii", 2049, n) + bytes((3 * i + seed) % 10 for i in range(n)))


@case()
def mnist_train_and_test() -> dict:
    from megengine.data.dataset import MNIST

    out = {}
    with _folder() as root:
        _write_mnist(root)
        for train in (True, False):
            ds = MNIST(root, train=train, download=False)
            out[f"train={train}"] = {"len": len(ds), "meta": ds.meta, "order": list(ds.order),
                                     "items": [list(ds[i]) for i in range(len(ds))]}
    return out


@case()
def mnist_missing_files_raises() -> dict:
    from megengine.data.dataset import MNIST

    with _folder() as root:
        return {"len": len(MNIST(root, download=False))}


# ----- CIFAR --------------------------------------------------------------------------------------
def _write_cifar(root: str, folder: str, batches: dict) -> None:
    """The extracted archive: one pickled dict per file, bytes keys, as in the real one."""
    os.mkdir(os.path.join(root, folder))
    for name, content in batches.items():
        with open(os.path.join(root, folder, name), "wb") as f:
            pickle.dump(content, f, protocol=2)


def _batch(seed: int, n: int, labels: dict) -> dict:
    rng = np.random.RandomState(seed)
    out = {b"batch_label": b"batch %d" % seed, b"data": _pixels(seed, n, 3072),
           b"filenames": [b"f%d.png" % i for i in range(n)]}
    for key, classes in labels.items():
        out[key] = [int(v) for v in rng.randint(0, classes, n)]
    return out


def _text(meta: dict) -> dict:
    """`meta` with bytes turned to str (the results travel as JSON)."""
    return {k.decode(): [s.decode() for s in v] if isinstance(v, list) else v
            for k, v in meta.items()}


def _cifar_results(ds: Any) -> dict:
    return {"len": len(ds), "order": list(ds.order), "meta": _text(ds.meta),
            "items": [list(ds[i]) for i in range(len(ds))]}


@case()
def cifar10_train_and_test() -> dict:
    from megengine.data.dataset import CIFAR10

    batches = {f"data_batch_{i}": _batch(i, i % 3 + 1, {b"labels": 10}) for i in range(1, 6)}
    batches["test_batch"] = _batch(9, 2, {b"labels": 10})
    batches["batches.meta"] = {b"num_cases_per_batch": 3, b"num_vis": 3072,
                               b"label_names": [b"airplane", b"automobile", b"bird"]}
    with _folder() as root:
        _write_cifar(root, "cifar-10-batches-py", batches)
        return {"train": _cifar_results(CIFAR10(root, download=False)),
                "test": _cifar_results(CIFAR10(root, train=False, download=False))}


@case()
def cifar100_train_and_test() -> dict:
    from megengine.data.dataset import CIFAR100

    labels = {b"fine_labels": 100, b"coarse_labels": 20}
    batches = {"train": _batch(1, 4, labels), "test": _batch(2, 3, labels),
               "meta": {b"fine_label_names": [b"apple", b"bee"],
                        b"coarse_label_names": [b"fruit", b"insects"]}}
    with _folder() as root:
        _write_cifar(root, "cifar-100-python", batches)
        return {"train": _cifar_results(CIFAR100(root, download=False)),
                "test": _cifar_results(CIFAR100(root, train=False, download=False))}


@case()
def cifar10_missing_files_raises() -> dict:
    from megengine.data.dataset import CIFAR10

    with _folder() as root:
        return {"len": len(CIFAR10(root, download=False))}
