"""`ImageNet` on a tiny extracted ILSVRC2012 layout made here: its splits, class indices, items,
devkit files and errors, as MegEngine 1.13's `ImageNet` reads an extracted folder."""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest

import eager
from eager.data.dataset import ImageFolder, ImageNet
from eager.data.errors import DatasetNotFoundError


def _image(seed: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (6, 5, 3)).astype(np.uint8)


@pytest.fixture
def root(tmp_path):
    """train/{n02,n01} (three images), val/n01 (one), and an empty devkit folder."""
    for split, wnid, name, seed in (("train", "n02", "b.png", 0), ("train", "n02", "a.png", 1),
                                    ("train", "n01", "c.png", 2), ("val", "n01", "d.png", 3)):
        (tmp_path / split / wnid).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(tmp_path / split / wnid / name), _image(seed))
    (tmp_path / "ILSVRC2012_devkit_t12").mkdir()
    return tmp_path


def test_splits_classes_and_items(root):
    train = ImageNet(str(root), train=True)
    assert isinstance(train, ImageFolder) and train.train
    assert train.class_dict == {"n01": 0, "n02": 1}
    assert [(os.path.relpath(p, root), int(label)) for p, label in train.samples] == \
        [("train/n01/c.png", 0), ("train/n02/a.png", 1), ("train/n02/b.png", 1)]
    image, label = train[1]
    assert type(label) is np.int32 and int(label) == 1
    np.testing.assert_array_equal(image, _image(1))  # BGR, as OpenCV decodes it
    assert train.order == ("image", "image_category")
    # as MegEngine's ImageFolder sets it, root becomes the split's folder
    assert train.root == str(root / "train") == train.target_folder
    assert train.devkit_dir == str(root / "ILSVRC2012_devkit_t12")
    val = ImageNet(root, train=False, class_name=True)
    assert len(val) == 1 and val[0][1] == "n01" and not val.check_raw_file()


def test_missing_folders_say_which_layout(root, tmp_path_factory):
    with pytest.raises(DatasetNotFoundError, match="does not exist; it should hold root/train"):
        ImageNet(str(root / "nowhere"))
    os.rename(root / "val", root / "valid")
    with pytest.raises(DatasetNotFoundError, match="val does not exist; extract the ILSVRC"):
        ImageNet(root, train=False)
    (root / "ILSVRC2012_img_val.tar").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="ILSVRC2012_img_val.tar are in .* not extracted"):
        ImageNet(root, train=False)
    os.rmdir(root / "ILSVRC2012_devkit_t12")
    with pytest.raises(DatasetNotFoundError, match="ILSVRC2012_devkit_t12 does not exist"):
        ImageNet(root, train=True)


def test_default_root(root, monkeypatch):
    (root / "eager" / "data").mkdir(parents=True)
    os.symlink(root, root / "eager" / "data" / "ImageNet")
    monkeypatch.setenv("XDG_CACHE_HOME", str(root))
    assert len(ImageNet(train=True)) == 3


def test_devkit_ground_truth_and_meta(root):
    data = root / "ILSVRC2012_devkit_t12" / "data"
    ds = ImageNet(root, train=False)
    with pytest.raises(DatasetNotFoundError, match="validation_ground_truth.txt does not exist"):
        _ = ds.valid_ground_truth
    with pytest.raises(DatasetNotFoundError, match="meta.mat does not exist"):
        _ = ds.meta
    data.mkdir()
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("490\n361\n")
    assert ds.valid_ground_truth == [490, 361]
    scipy_io = pytest.importorskip("scipy.io")
    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("gloss", "O"),
              ("num_children", "O")]
    synsets = np.array([(1, "n01", "tench, Tinca tinca", "a fish", 0),
                        (2, "n02", "goldfish", "a fish", 0),
                        (1001, "n99", "animal", "not a class", 2)], dtype=fields)
    scipy_io.savemat(str(data / "meta.mat"), {"synsets": synsets})
    expected = ({1: "n01", 2: "n02"}, {"n01": ("tench", "Tinca tinca"), "n02": ("goldfish",)})
    assert ds.meta == expected
    os.remove(data / "meta.mat")  # now read from the cache it wrote, as MegEngine's is
    assert eager.load(str(root / "ILSVRC2012_devkit_t12" / "meta.pkl")) == expected
    assert ds.meta == expected
