"""`eager.data.dataset`: the containers, and the image datasets read from small fake files
written here in each dataset's real format (class folders of images, gzip'd IDX files; CIFAR's
archives are in test_cifar.py)."""

from __future__ import annotations

import gzip
import os
import pickle
import struct

import cv2
import numpy as np
import pytest

from eager.core.errors import CheckpointError
from eager.data.dataset import (
    MNIST,
    ArrayDataset,
    ConcatDataset,
    Dataset,
    ImageFolder,
    StreamDataset,
    VisionDataset,
)
from eager.data.errors import DatasetNotFoundError


# ----- containers ---------------------------------------------------------------------------------
def test_array_dataset_items_are_rows():
    x, y = np.arange(12).reshape(4, 3), np.arange(4) * 10
    ds = ArrayDataset(x, y, [5, 6, 7, 8])
    assert len(ds) == 4
    a, b, c = ds[2]
    np.testing.assert_array_equal(a, x[2])
    assert (b, c) == (20, 7)


def test_array_dataset_refuses_unequal_lengths_and_no_arrays():
    with pytest.raises(ValueError, match=r"inconsistent: \[3, 2\]"):
        ArrayDataset(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="at least one array"):
        ArrayDataset()


def test_concat_dataset_indexes_across_parts():
    a, b = ArrayDataset(np.arange(3)), ArrayDataset(np.arange(10, 12))
    ds = ConcatDataset([a, ArrayDataset(np.arange(0)), b])
    assert len(ds) == 5 and ds.cumulative_sizes == [3, 3, 5]
    assert [int(ds[i][0]) for i in range(5)] == [0, 1, 2, 10, 11]
    assert int(ds[-1][0]) == 11 and int(ds[-5][0]) == 0
    for bad in (5, -6):
        with pytest.raises(IndexError, match="out of range"):
            ds[bad]
    assert [int(item[0]) for item in ds] == [0, 1, 2, 10, 11]  # IndexError ends iteration


class _Stream(StreamDataset):
    def __iter__(self):
        yield from range(3)


def test_stream_dataset_iterates_and_has_no_length_or_index():
    s = _Stream()
    assert list(s) == [0, 1, 2]
    for caught in (TypeError, AssertionError):  # MegEngine raises AssertionError
        with pytest.raises(caught, match="no length"):
            len(s)
        with pytest.raises(caught, match="by index"):
            s[0]
    with pytest.raises(TypeError, match="StreamDataset"):
        ConcatDataset([ArrayDataset([1]), s])
    with pytest.raises(ValueError, match="at least one"):
        ConcatDataset([])


def test_dataset_is_abstract_and_needs_no_init():
    with pytest.raises(TypeError):
        Dataset()  # type: ignore[abstract]

    class Squares(Dataset):
        def __getitem__(self, i):
            return i * i

        def __len__(self):
            return 4

    assert len(Squares()) == 4 and Squares()[3] == 9


def test_vision_dataset_order():
    ds = VisionDataset("~/somewhere")
    assert ds.order == ("image",) and ds.root == os.path.expanduser("~/somewhere")
    with pytest.raises(ValueError, match="sequence"):
        VisionDataset("r", order=5)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="boxes is unsupported"):
        VisionDataset("r", order=("image", "boxes"), supported_order=("image",))
    with pytest.raises(NotImplementedError):
        len(ds)


# ----- ImageFolder --------------------------------------------------------------------------------
def _image(seed: int, h: int = 5, w: int = 4) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (h, w, 3)).astype(np.uint8)


@pytest.fixture
def folder(tmp_path):
    """root/{cat,dog,empty}: PNGs, a BMP, an upper-case extension, a nested folder, a JPEG and
    files that are not images."""
    for name in ("dog", "cat", "empty", "cat/inner"):
        (tmp_path / name).mkdir()
    cv2.imwrite(str(tmp_path / "dog" / "b.png"), _image(0))
    cv2.imwrite(str(tmp_path / "dog" / "a.BMP"), _image(1))
    cv2.imwrite(str(tmp_path / "cat" / "z.png"), _image(2))
    cv2.imwrite(str(tmp_path / "cat" / "inner" / "c.png"), _image(3))
    cv2.imwrite(str(tmp_path / "cat" / "photo.jpg"), _image(4, 16, 16))
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    (tmp_path / "stray.png").write_bytes(b"")  # not in a class folder
    return tmp_path


def test_image_folder_classes_samples_and_items(folder):
    ds = ImageFolder(str(folder))
    assert ds.class_dict == {"cat": 0, "dog": 1, "empty": 2}
    assert all(type(v) is np.int32 for v in ds.class_dict.values())
    rel = [(os.path.relpath(p, folder), int(label)) for p, label in ds.samples]
    assert rel == [("cat/photo.jpg", 0), ("cat/z.png", 0), ("cat/inner/c.png", 0),
                   ("dog/a.BMP", 1), ("dog/b.png", 1)]
    assert len(ds) == 5 and ds.order == ("image", "image_category")
    image, label = ds[1]
    assert image.dtype == np.uint8 and image.shape == (5, 4, 3) and type(label) is np.int32
    np.testing.assert_array_equal(image, _image(2))  # BGR in, BGR out
    np.testing.assert_array_equal(ds[3][0], _image(1))
    assert ds[0][0].shape == (16, 16, 3)


def test_image_folder_class_names_and_check_function(folder):
    ds = ImageFolder(folder, check_valid_func=lambda p: p.endswith(".png"), class_name=True)
    assert [(os.path.basename(p), label) for p, label in ds.samples] == \
        [("z.png", "cat"), ("c.png", "cat"), ("b.png", "dog")]
    assert ds[2][1] == "dog"
    assert len(pickle.dumps(ds)) < 2000  # paths only: cheap to send to worker processes
    assert pickle.loads(pickle.dumps(ds))[0][0].shape == (5, 4, 3)


def test_image_folder_grayscale_and_alpha_become_bgr(tmp_path):
    (tmp_path / "a").mkdir()
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4)
    cv2.imwrite(str(tmp_path / "a" / "g.png"), gray)
    cv2.imwrite(str(tmp_path / "a" / "h.png"), np.full((3, 4, 4), 7, np.uint8))
    ds = ImageFolder(tmp_path)
    np.testing.assert_array_equal(ds[0][0], np.repeat(gray[..., None], 3, axis=2))
    assert ds[1][0].shape == (3, 4, 3)


def test_image_folder_errors(folder, tmp_path):
    with pytest.raises(DatasetNotFoundError, match="nowhere is not a directory"):
        ImageFolder(str(tmp_path / "nowhere"))
    (folder / "dog" / "broken.png").write_bytes(b"not a png")
    ds = ImageFolder(folder)
    with pytest.raises(CheckpointError, match="cannot decode .*broken.png"):
        ds[5]
    os.remove(folder / "dog" / "a.BMP")
    with pytest.raises(FileNotFoundError, match="a.BMP was listed"):
        ds[3]


# ----- MNIST --------------------------------------------------------------------------------------
MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def _write_mnist(root, n_train: int = 5, n_test: int = 3, h: int = 28, w: int = 28):
    """The four IDX files of MNIST's distribution: images of seeded noise, labels i % 10."""
    rng = np.random.RandomState(0)
    for (images, labels), n in zip(((MNIST_FILES[0], MNIST_FILES[1]),
                                    (MNIST_FILES[2], MNIST_FILES[3])), (n_train, n_test)):
        pixels = rng.randint(0, 256, (n, h, w)).astype(np.uint8)
        with gzip.open(os.path.join(root, images), "wb") as f:
            f.write(struct.pack(">iiii", 2051, n, h, w) + pixels.tobytes())
        with gzip.open(os.path.join(root, labels), "wb") as f:
            f.write(struct.pack(">ii", 2049, n) + bytes(i % 10 for i in range(n)))
    return rng


def test_mnist_items_meta_and_splits(tmp_path):
    _write_mnist(tmp_path)
    pixels = np.random.RandomState(0).randint(0, 256, (5, 28, 28)).astype(np.uint8)
    train, test = MNIST(str(tmp_path)), MNIST(tmp_path, train=False, download=False)
    assert (len(train), len(test)) == (5, 3)
    image, label = train[4]
    assert image.shape == (28, 28, 1) and image.dtype == np.uint8 and type(label) is np.int32
    np.testing.assert_array_equal(image[..., 0], pixels[4])
    assert label == 4 and image.flags.writeable
    assert train.meta == {"images": {"magic": 2051, "imgs": 5, "height": 28, "width": 28},
                          "labels": {"magic": 2049, "imgs": 5}}
    assert test.meta["images"]["imgs"] == 3 and int(test[2][1]) == 2
    assert pickle.loads(pickle.dumps(train))[4][1] == 4


def test_mnist_missing_files_say_what_and_where(tmp_path, monkeypatch):
    with pytest.raises(DatasetNotFoundError) as e:
        MNIST(str(tmp_path / "mnist"))
    message = str(e.value)
    for expected in ("MNIST", MNIST_FILES[0], MNIST_FILES[1], str(tmp_path / "mnist"),
                     "does not exist", "https://ossci-datasets.s3.amazonaws.com/mnist/"):
        assert expected in message
    assert MNIST_FILES[2] not in message and not (tmp_path / "mnist").exists()
    assert isinstance(e.value, FileNotFoundError)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DatasetNotFoundError, match=str(tmp_path / "cache/eager/data/MNIST")):
        MNIST()
    _write_mnist(tmp_path)
    os.remove(tmp_path / MNIST_FILES[3])
    assert len(MNIST(tmp_path)) == 5  # the test files are not needed for the training split
    with pytest.raises(DatasetNotFoundError, match=MNIST_FILES[3]):
        MNIST(tmp_path, train=False)


def test_mnist_refuses_corrupt_files(tmp_path):
    _write_mnist(tmp_path)
    with gzip.open(tmp_path / MNIST_FILES[1], "wb") as f:
        f.write(struct.pack(">ii", 2049, 4) + bytes(4))
    with pytest.raises(CheckpointError, match="5 images but .* 4 labels"):
        MNIST(tmp_path)
    with gzip.open(tmp_path / MNIST_FILES[0], "wb") as f:
        f.write(struct.pack(">iiii", 2051, 5, 28, 28) + bytes(100))
    with pytest.raises(CheckpointError, match="truncated"):
        MNIST(tmp_path)
    (tmp_path / MNIST_FILES[0]).write_bytes(b"plain, not gzip")
    with pytest.raises(CheckpointError, match="gzip"):
        MNIST(tmp_path)
    with gzip.open(tmp_path / MNIST_FILES[0], "wb") as f:
        f.write(struct.pack(">ii", 2049, 0))
    with pytest.raises(CheckpointError, match="magic number 2051"):
        MNIST(tmp_path)
