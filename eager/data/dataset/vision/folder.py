"""`ImageFolder`: images sorted into one folder per class, `root/<class>/.../<image>`."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from ....core.errors import CheckpointError
from ...errors import DatasetNotFoundError
from .meta_vision import PathLike, VisionDataset

IMG_EXT = (".jpg", ".png", ".jpeg", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""The file name endings (any case) `ImageFolder` counts as images by default."""


def is_img(path: str) -> bool:
    """Whether `path` ends with one of `IMG_EXT`, in any case."""
    return path.lower().endswith(IMG_EXT)


def imread(path: str) -> np.ndarray:
    """The image at `path` as OpenCV decodes it: HxWx3 uint8, channels in BGR order."""
    try:
        import cv2
    except ImportError as e:
        raise ImportError("ImageFolder decodes images with OpenCV, which is not installed: "
                          "pip install opencv-python-headless") from e
    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        if not os.path.isfile(path):
            raise DatasetNotFoundError(f"ImageFolder: {path} was listed when the dataset was "
                                       "made and is gone")
        raise CheckpointError(f"ImageFolder: OpenCV cannot decode {path} as an image; remove "
                              "it, or pass check_valid_func= a function that leaves it out")
    return np.asarray(image)


class ImageFolder(VisionDataset):
    """Images in class folders: `root/<class>/<image>`, subfolders of a class folder included.

    Classes are the folders directly under `root`, numbered in sorted order of their names
    (`class_dict`: name -> numpy int32 index). An item is `(image, label)`: the image as
    `cv2.imread` decodes it (HxWx3 uint8, BGR) and the label its class's index, or its name
    when `class_name` is true. `check_valid_func(path)` says which files are images; by default
    those whose name ends with one of `IMG_EXT`. Files are listed once, here, in sorted order;
    images are decoded as items are read.
    """

    def __init__(self, root: PathLike, check_valid_func: Callable[[str], bool] | None = None,
                 class_name: bool = False) -> None:
        super().__init__(root, order=("image", "image_category"))
        if not os.path.isdir(self.root):
            raise DatasetNotFoundError(f"ImageFolder: {self.root} is not a directory; "
                                       "ImageFolder reads root/<class name>/<image file>")
        self.class_name = class_name
        names = sorted(entry.name for entry in os.scandir(self.root) if entry.is_dir())
        self.class_dict = {name: np.int32(i) for i, name in enumerate(names)}
        valid = is_img if check_valid_func is None else check_valid_func
        # (path, label) only: a loader pickles the dataset to its workers; the check function,
        # which may be a lambda, is used here and not kept
        self.samples: list[tuple[str, np.int32 | str]] = [
            (path, name if class_name else self.class_dict[name])
            for name in names for path in _files(os.path.join(self.root, name), valid)]

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int32 | str]:
        path, label = self.samples[index]
        return imread(path), label

    def __len__(self) -> int:
        return len(self.samples)


def _files(folder: str, valid: Callable[[str], bool]) -> list[str]:
    """The files under `folder` for which `valid` holds, folder by folder in sorted order of
    the folders' paths, each folder's files sorted; links to folders are followed."""
    found: list[str] = []
    for dirpath, _, files in sorted(os.walk(folder, followlinks=True), key=lambda w: w[0]):
        found.extend(path for path in (os.path.join(dirpath, f) for f in sorted(files))
                     if valid(path))
    return found
