"""`eager.data.dataset`: the containers, and the image datasets read from small fake files
written here in each dataset's real format (class folders of images, gzip'd IDX files, CIFAR's
tar.gz of Python 2 pickles)."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import tarfile

import cv2
import numpy as np
import pytest

from eager.data.dataset import (
    CIFAR10,
    CIFAR100,
    MNIST,
    ArrayDataset,
    ConcatDataset,
    Dataset,
    ImageFolder,
    StreamDataset,
    VisionDataset,
)
from eager.data.errors import DatasetNotFoundError
from eager.errors import CheckpointError


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
    with pytest.raises(TypeError, match="no length"):
        len(s)
    with pytest.raises(TypeError, match="by index"):
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


# ----- CIFAR --------------------------------------------------------------------------------------
def _py2_pickle(obj) -> bytes:
    """`obj` as Python 2's cPickle (protocol 2) writes it, as in CIFAR's archives: str (here
    bytes) as BINSTRING, numpy arrays as numpy 1.x reduces them under Python 2."""
    out = bytearray(b"\x80\x02")
    _emit(obj, out)
    return bytes(out + b".")


def _emit(obj, out: bytearray) -> None:
    if obj is None:
        out += b"N"
    elif isinstance(obj, bool):
        out += b"\x88" if obj else b"\x89"
    elif isinstance(obj, int):
        out += b"J" + struct.pack("<i", obj)
    elif isinstance(obj, bytes):
        out += (b"U" + bytes([len(obj)]) if len(obj) < 256 else
                b"T" + struct.pack("<i", len(obj))) + obj
    elif isinstance(obj, tuple):
        out += b"("
        for v in obj:
            _emit(v, out)
        out += b"t"
    elif isinstance(obj, list):
        out += b"]("
        for v in obj:
            _emit(v, out)
        out += b"e"
    elif isinstance(obj, dict):
        out += b"}("
        for k, v in obj.items():
            _emit(k, out)
            _emit(v, out)
        out += b"u"
    else:
        assert isinstance(obj, np.ndarray) and obj.dtype == np.uint8
        out += b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n"
        _emit((0,), out)
        _emit(b"b", out)
        out += b"tR"  # _reconstruct(ndarray, (0,), "b")
        out += b"(K\x01"
        _emit(obj.shape, out)
        out += b"cnumpy\ndtype\n"
        _emit((b"u1", 0, 1), out)
        out += b"R"
        _emit((3, b"|", None, None, None, -1, -1, 0), out)
        out += b"b\x89"
        _emit(obj.tobytes(), out)
        out += b"tb"


def test_py2_pickle_writer_writes_what_numpy_reads():
    a = np.arange(12, dtype=np.uint8).reshape(3, 4)
    back = pickle.loads(_py2_pickle({b"data": a, b"labels": [1, 2]}), encoding="bytes")
    np.testing.assert_array_equal(back[b"data"], a)
    assert back[b"labels"] == [1, 2]


def _cifar_batches(hundred: bool, sizes: tuple[int, ...] = (2, 1, 3, 1, 2, 2)) -> dict:
    """name -> the dict each file of the archive holds, in CIFAR's layout (sizes: images per
    batch, the test batch last)."""
    rng = np.random.RandomState(1)
    names = ["train", "test"] if hundred else [*CIFAR10.train_batch, "test_batch"]
    sizes = (4, 3) if hundred else sizes
    batches = {}
    for name, n in zip(names, sizes):
        batch = {b"batch_label": name.encode(), b"data": rng.randint(0, 256, (n, 3072))
                 .astype(np.uint8), b"filenames": [b"img%d.png" % i for i in range(n)]}
        if hundred:
            batch[b"fine_labels"] = [int(v) for v in rng.randint(0, 100, n)]
            batch[b"coarse_labels"] = [int(v) for v in rng.randint(0, 20, n)]
        else:
            batch[b"labels"] = [int(v) for v in rng.randint(0, 10, n)]
        batches[name] = batch
    if hundred:
        batches["meta"] = {b"fine_label_names": [b"apple", b"bee"],
                           b"coarse_label_names": [b"fruit", b"insects"]}
    else:
        batches["batches.meta"] = {b"num_cases_per_batch": 4, b"num_vis": 3072,
                                   b"label_names": [b"airplane", b"automobile"]}
    return batches


def _write_cifar_archive(path, folder: str, files: dict) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = content if isinstance(content, bytes) else _py2_pickle(content)
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _bgr(data: np.ndarray) -> np.ndarray:
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)[..., ::-1]


def test_cifar10_from_archive(tmp_path):
    batches = _cifar_batches(False)
    _write_cifar_archive(tmp_path / "cifar-10-python.tar.gz", "cifar-10-batches-py", batches)
    train = CIFAR10(str(tmp_path), download=False)
    assert len(train) == 9 and train.order == ("image", "image_category")
    image, label = train[5]
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8 and type(label) is np.int32
    np.testing.assert_array_equal(image, _bgr(batches["data_batch_3"][b"data"])[2])
    assert label == batches["data_batch_3"][b"labels"][2]
    assert train.meta[b"label_names"] == [b"airplane", b"automobile"]
    test = CIFAR10(tmp_path, train=False)
    assert len(test) == 2 and test[1][1] == batches["test_batch"][b"labels"][1]
    assert not (tmp_path / "cifar-10-batches-py").exists()  # read in place, never extracted
    assert pickle.loads(pickle.dumps(test))[1][1] == test[1][1]


def test_cifar10_needs_every_training_batch(tmp_path):
    batches = _cifar_batches(False)
    for name in ("data_batch_3", "data_batch_4", "data_batch_5"):
        del batches[name]
    _write_cifar_archive(tmp_path / "cifar-10-python.tar.gz", "cifar-10-batches-py", batches)
    with pytest.raises(DatasetNotFoundError, match="no data_batch_3, data_batch_4, data_batch_5"):
        CIFAR10(tmp_path)
    assert len(CIFAR10(tmp_path, train=False)) == 2


@pytest.fixture
def cifar10_train_root(tmp_path):
    batches = _cifar_batches(False)
    os.mkdir(tmp_path / "cifar-10-batches-py")
    for name, content in batches.items():
        (tmp_path / "cifar-10-batches-py" / name).write_bytes(_py2_pickle(content))
    return tmp_path, batches


def test_cifar10_from_extracted_folder(cifar10_train_root):
    root, batches = cifar10_train_root
    train = CIFAR10(root)
    assert len(train) == 9
    want = np.concatenate([_bgr(batches[f"data_batch_{i}"][b"data"]) for i in range(1, 6)])
    np.testing.assert_array_equal(train.arrays[0], want)
    np.testing.assert_array_equal(train.arrays[1], sum((batches[f"data_batch_{i}"][b"labels"]
                                                        for i in range(1, 6)), []))
    assert train.arrays[1].dtype == np.int32 and train.arrays[0].flags.c_contiguous
    assert train.meta[b"num_vis"] == 3072


def test_cifar100_items_and_meta(tmp_path):
    batches = _cifar_batches(True)
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar-100-python", batches)
    train, test = CIFAR100(tmp_path), CIFAR100(tmp_path, train=False)
    assert (len(train), len(test)) == (4, 3)
    image, fine, coarse = test[2]
    np.testing.assert_array_equal(image, _bgr(batches["test"][b"data"])[2])
    assert (fine, coarse) == (batches["test"][b"fine_labels"][2],
                              batches["test"][b"coarse_labels"][2])
    assert type(fine) is np.int32 and type(coarse) is np.int32
    assert train.meta[b"coarse_label_names"] == [b"fruit", b"insects"]
    assert train.order == ("image", "image_category")


def test_cifar_reads_python3_pickles_too(tmp_path):
    batches = _cifar_batches(True)
    files = {k: pickle.dumps(v, protocol=p) for (k, v), p in zip(batches.items(), (2, 4, 5))}
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "./cifar-100-python", files)
    ds = CIFAR100(tmp_path)
    np.testing.assert_array_equal(ds.arrays[0], _bgr(batches["train"][b"data"]))
    assert ds.meta[b"fine_label_names"] == [b"apple", b"bee"]


def test_cifar_missing_files_say_what_and_where(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        CIFAR10(str(tmp_path))
    for expected in ("CIFAR10", "cifar-10-python.tar.gz", "cifar-10-batches-py", str(tmp_path),
                     "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"):
        assert expected in str(e.value)
    (tmp_path / "cifar-100-python").mkdir()
    with pytest.raises(DatasetNotFoundError, match=r"CIFAR100: train not found in .*cifar-100"):
        CIFAR100(tmp_path)


class _Boom:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cifar_refuses_a_pickle_that_names_code(tmp_path):
    marker = tmp_path / "ran"
    batches = _cifar_batches(True)
    batches["train"] = pickle.dumps({b"data": _Boom(str(marker)), b"fine_labels": []})
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar-100-python", batches)
    with pytest.raises(CheckpointError, match=r"train: the pickle names the Python global "
                                              r"(posix|os)\.system.*refused"):
        CIFAR100(tmp_path)
    assert not marker.exists()
    batches["train"] = _cifar_batches(True)["train"]
    batches["meta"] = pickle.dumps({b"fine_label_names": [_Boom(str(marker))]})
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar-100-python", batches)
    with pytest.raises(CheckpointError, match="system"):
        CIFAR100(tmp_path).meta  # noqa: B018
    assert not marker.exists()


def test_cifar_refuses_malformed_batches(tmp_path):
    batches = _cifar_batches(True)
    batches["train"][b"data"] = batches["train"][b"data"][:, :100]
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar-100-python", batches)
    with pytest.raises(CheckpointError, match=r"shape \(N, 3072\)"):
        CIFAR100(tmp_path)
    batches = _cifar_batches(True)
    batches["test"][b"coarse_labels"] = [1]
    batches["train"] = b"\x80\x02garbage"
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar-100-python", batches)
    with pytest.raises(CheckpointError, match="coarse_labels.*list of 3 integer"):
        CIFAR100(tmp_path, train=False)
    with pytest.raises(CheckpointError, match="not a readable pickle"):
        CIFAR100(tmp_path)
    (tmp_path / "cifar-100-python.tar.gz").write_bytes(b"not an archive")
    with pytest.raises(CheckpointError, match="not a complete tar.gz"):
        CIFAR100(tmp_path)


def test_cifar_archive_members_outside_the_folder_are_ignored(tmp_path):
    batches = _cifar_batches(True)
    files = {f"../{k}": v for k, v in batches.items()}
    _write_cifar_archive(tmp_path / "cifar-100-python.tar.gz", "cifar-100-python", files)
    with pytest.raises(DatasetNotFoundError, match="has no train in its folder cifar-100-python/"):
        CIFAR100(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["cifar-100-python.tar.gz"]
