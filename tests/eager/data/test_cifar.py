"""CIFAR10 and CIFAR100 read from fake archives written here in the real format: a tar.gz of
Python 2 pickles (written by hand, as Python 3 no longer writes them), or its extracted folder;
and what they refuse (pickles that name code, malformed batches, members outside the folder)."""

from __future__ import annotations

import io
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest

from eager.core.errors import CheckpointError
from eager.data.dataset import (
    CIFAR10,
    CIFAR100,
)
from eager.data.errors import DatasetNotFoundError


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
