"""`COCO`, `Objects365` and `PascalVOC` read from tiny fake datasets written here in each one's
real layout: a COCO-style JSON annotation file beside PNG and JPEG images; a VOC devkit folder
of JPEGImages, Annotations (XML), colour and "aug" masks and ImageSets split lists."""

from __future__ import annotations

import json
import os
import pickle

import cv2
import numpy as np
import pytest

from eager.core.errors import CheckpointError
from eager.data.dataset import COCO, Objects365, PascalVOC, VisionDataset
from eager.data.dataset.vision.meta_vision import VisionDataset as MetaVisionDataset
from eager.data.errors import DatasetNotFoundError


def _pixels(seed: int, *shape: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, shape).astype(np.uint8)


# ----- COCO-style files ---------------------------------------------------------------------------
def _kp(visible: int) -> list[int]:
    """17 keypoints, the first `visible` of them visible."""
    return [v for i in range(17) for v in (i, 2 * i, 2 if i < visible else 0)]


# Images 3, 5, 7, 12 (listed out of order); categories with json ids 18, 1, 90 (contiguous ids
# 2, 1, 3). Image 3: a box and a crowd; 5: nothing; 7: a box of no width; 12: two boxes.
ANNOTATIONS = [
    {"id": 1, "image_id": 3, "category_id": 18, "bbox": [1, 2, 3, 4], "iscrowd": 0,
     "keypoints": _kp(12), "segmentation": [[1, 2, 4, 2, 4, 6]]},
    {"id": 2, "image_id": 3, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 1,
     "keypoints": _kp(17), "segmentation": {"counts": [3, 4], "size": [6, 8]}},
    {"id": 3, "image_id": 7, "category_id": 90, "bbox": [2, 2, 0, 3], "iscrowd": 0,
     "keypoints": _kp(17)},
    {"id": 4, "image_id": 12, "category_id": 1, "bbox": [1.5, 0.5, 2, 2], "iscrowd": 0,
     "keypoints": _kp(4)},
    {"id": 5, "image_id": 12, "category_id": 90, "bbox": [0, 1, 3, 1], "iscrowd": 0,
     "keypoints": _kp(5)},
]


def _coco(tmp_path, annotations=ANNOTATIONS, **extra) -> tuple[str, str, dict]:
    """The image folder, the annotation file and the images written (by id)."""
    root = tmp_path / "images"
    root.mkdir()
    images, written = [], {}
    for img_id, (h, w), name in ((7, (6, 8), "b.png"), (3, (5, 4), "a.png"),
                                 (12, (16, 8), "c.jpg"), (5, (3, 3), "d.png")):
        written[img_id] = _pixels(img_id, h, w, 3)
        cv2.imwrite(str(root / name), written[img_id])
        images.append({"id": img_id, "file_name": name, "height": h, "width": w,
                       "license": 2, "coco_url": "http://x", "flickr_url": "http://y",
                       "date_captured": "2013"})
    content = {"images": images, "annotations": annotations, "info": {}, **extra,
               "categories": [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"},
                              {"id": 90, "name": "toothbrush"}]}
    ann_file = tmp_path / "ann.json"
    ann_file.write_text(json.dumps(content))
    return str(root), str(ann_file), written


def test_coco_items_hold_every_field_in_order(tmp_path):
    root, ann_file, written = _coco(tmp_path)
    ds = COCO(root, ann_file, order=["info", "boxes", "image", "boxes_category"])
    assert len(ds) == 4 and ds.ids == [3, 5, 7, 12]
    assert ds.json_category_id_to_contiguous_id == {1: 1, 18: 2, 90: 3}
    assert ds.contiguous_category_id_to_json_id == {1: 1, 2: 18, 3: 90}
    info, boxes, image, category = ds[0]
    assert info == [5, 4, "a.png"]
    np.testing.assert_array_equal(image, written[3])  # PNG: exact
    assert boxes.dtype == np.float32 and category.dtype == np.int32
    np.testing.assert_array_equal(boxes, [[1, 2, 4, 6], [0, 0, 5, 5]])  # crowds kept
    np.testing.assert_array_equal(category, [2, 1])
    info, boxes, image, category = ds[1]  # no annotations
    assert boxes.shape == (0, 4) and category.shape == (0,) and image.shape == (3, 3, 3)
    info, boxes, image, category = ds[-1]
    assert info == [16, 8, "c.jpg"] and image.shape == (16, 8, 3) and image.dtype == np.uint8
    np.testing.assert_allclose(boxes, [[1.5, 0.5, 3.5, 2.5], [0, 1, 3, 2]])
    np.testing.assert_array_equal(category, [1, 3])
    image, = COCO(root, ann_file)[2]  # order defaults to ("image",)
    np.testing.assert_array_equal(image, written[7])


def test_coco_image_info_is_the_record_without_urls_and_license(tmp_path):
    root, ann_file, _ = _coco(tmp_path)
    ds = COCO(root, ann_file, order=("image", "info"))
    assert ds.get_img_info(3) == {"id": 12, "file_name": "c.jpg", "height": 16, "width": 8}
    assert all("segmentation" not in a for anns in ds.img_to_anns.values() for a in anns)
    assert set(ds.cats) == {1, 18, 90}


def test_coco_remove_images_without_annotations(tmp_path):
    root, ann_file, _ = _coco(tmp_path)
    ds = COCO(root, ann_file, remove_images_without_annotations=True,
              order=("image", "boxes", "boxes_category", "info"))
    # 3 loses its crowd, 5 has nothing, 7 only a box of no width
    assert ds.ids == [3, 12] and sorted(ds.imgs) == [3, 12]
    _, boxes, category, info = ds[0]
    np.testing.assert_array_equal(boxes, [[1, 2, 4, 6]])
    np.testing.assert_array_equal(category, [2])
    assert info == [5, 4, "a.png"] and ds.get_img_info(1)["id"] == 12
    # MegEngine raises KeyError('bbox') here: it drops the boxes it then filters on
    assert COCO(root, ann_file, True, order=("image", "info")).ids == [3, 12]
    assert COCO(root, ann_file, True).ids == [3, 12]


def test_coco_keypoints_and_keypoint_filter(tmp_path):
    root, ann_file, _ = _coco(tmp_path)
    ds = COCO(root, ann_file, order=("keypoints", "boxes_category"))
    points, category = ds[3]
    assert points.shape == (2, 17, 3) and points.dtype == np.float32
    np.testing.assert_array_equal(points[0, 3], [3, 6, 2])
    np.testing.assert_array_equal(points[1, 5:, 2], 0)
    np.testing.assert_array_equal(category, [1, 3])
    assert ds[1][0].shape == (0, 17, 3)
    # image 3 keeps 12 visible keypoints after its crowd goes; image 12 has 4 + 5 < 10
    kept = COCO(root, ann_file, True, order=("image", "keypoints"))
    assert kept.ids == [3]
    assert COCO(root, ann_file, True, order=("boxes",)).ids == [3, 12]
    assert len(COCO.keypoint_names) == 17


def test_coco_class_tables():
    assert len(COCO.class_names) == 80 and COCO.class_names[:3] == ("person", "bicycle", "car")
    assert COCO.classes_originID["toothbrush"] == 90 and COCO.classes_originID["stop sign"] == 13
    assert list(COCO.classes_originID) == list(COCO.class_names)
    assert COCO.supported_order == ("image", "boxes", "boxes_category", "keypoints", "info")


@pytest.mark.parametrize("order", [("image", "polygons"), ("mask",), ("image_category",)])
def test_coco_unsupported_order_raises(tmp_path, order):
    root, ann_file, _ = _coco(tmp_path)
    with pytest.raises(NotImplementedError, match="unsupported"):
        COCO(root, ann_file, order=order)


def test_coco_missing_and_broken_files_raise(tmp_path):
    root, ann_file, _ = _coco(tmp_path)
    with pytest.raises(DatasetNotFoundError, match="annotation file .*absent.json"):
        COCO(root, str(tmp_path / "absent.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CheckpointError, match="not a JSON file"):
        COCO(root, str(bad))
    bad.write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(CheckpointError, match='no "categories" list'):
        COCO(root, str(bad))
    os.remove(os.path.join(root, "b.png"))
    with pytest.raises(DatasetNotFoundError, match="b.png not found"):
        COCO(root, ann_file)[2]
    with open(os.path.join(root, "a.png"), "w") as f:
        f.write("not an image")
    with pytest.raises(CheckpointError, match="cannot decode .*a.png"):
        COCO(root, ann_file)[0]


def test_coco_annotations_missing_what_the_order_needs_raise(tmp_path):
    no_box = [dict(ANNOTATIONS[0], bbox=None)]
    del no_box[0]["bbox"]
    root, ann_file, _ = _coco(tmp_path, no_box)
    assert len(COCO(root, ann_file, order=("image", "info"))) == 4  # boxes not needed
    with pytest.raises(CheckpointError, match='"annotations" .* has no bbox'):
        COCO(root, ann_file, order=("boxes",))
    with pytest.raises(CheckpointError, match='"annotations" .* has no bbox'):
        COCO(root, ann_file, remove_images_without_annotations=True)


def test_coco_bad_category_and_keypoints_raise(tmp_path):
    root, ann_file, _ = _coco(tmp_path, [dict(ANNOTATIONS[0], category_id=7)])
    assert len(COCO(root, ann_file, order=("boxes",))) == 4
    with pytest.raises(CheckpointError, match="category_id 7"):
        COCO(root, ann_file, order=("boxes_category",))


def test_coco_short_keypoints_raise(tmp_path):
    root, ann_file, _ = _coco(tmp_path, [dict(ANNOTATIONS[0], keypoints=[1, 2, 2])])
    with pytest.raises(CheckpointError, match="3 keypoint values"):
        COCO(root, ann_file, order=("keypoints",))[0]


def test_coco_pickles_for_loader_workers(tmp_path):
    root, ann_file, written = _coco(tmp_path)
    ds = pickle.loads(pickle.dumps(COCO(root, ann_file, True, order=("image", "boxes"))))
    np.testing.assert_array_equal(ds[0][0], written[3])


# ----- Objects365 ---------------------------------------------------------------------------------
def test_objects365_items_and_filter(tmp_path):
    root, ann_file, written = _coco(tmp_path)
    ds = Objects365(root, ann_file, order=("image", "boxes", "boxes_category", "info"))
    assert ds.ids == [3, 5, 7, 12]
    image, boxes, category, info = ds[0]
    np.testing.assert_array_equal(image, written[3])
    np.testing.assert_array_equal(boxes, [[1, 2, 4, 6], [0, 0, 5, 5]])
    np.testing.assert_array_equal(category, [2, 1])
    assert info == [5, 4, "a.png"]
    assert ds.get_img_info(0)["coco_url"] == "http://x"  # the record is kept whole
    # no keypoint rule: image 12 stays
    assert Objects365(root, ann_file, True, order=("boxes",)).ids == [3, 12]
    with pytest.raises(NotImplementedError, match="keypoints is unsupported"):
        Objects365(root, ann_file, order=("keypoints",))
    assert len(Objects365.class_names) == len(set(Objects365.class_names)) == 365
    assert Objects365.class_names[-1] == "flashlight"
    assert not hasattr(Objects365, "classes_originID")  # the zoo numbers its ids i + 1


# ----- Pascal VOC ---------------------------------------------------------------------------------
def _xml(*objects: tuple[str, tuple]) -> str:
    parts = "".join(
        f"<object><name>{name}</name><pose>Left</pose><difficult>{i % 2}</difficult>"
        f"<bndbox><xmin>{box[0]}</xmin><ymin>{box[1]}</ymin><xmax>{box[2]}</xmax>"
        f"<ymax>{box[3]}</ymax></bndbox></object>" for i, (name, box) in enumerate(objects))
    return (f"<annotation><folder>VOC2012</folder><filename>x.jpg</filename><size><width>4"
            f"</width><height>5</height><depth>3</depth></size>{parts}</annotation>")


def _voc(tmp_path) -> tuple[str, dict]:
    """A devkit year folder: three detection images (two objects, one, none), a segmentation
    split of two images with colour masks and an "aug" split with index masks."""
    root = tmp_path / "VOC2012"
    for folder in ("JPEGImages", "Annotations", "ImageSets/Main", "ImageSets/Segmentation",
                   "SegmentationClass", "SegmentationClass_aug"):
        (root / folder).mkdir(parents=True)
    written = {}
    for i, name in enumerate(("2008_000001", "2008_000002", "2008_000003")):
        written[name] = _pixels(i, 5 + i, 4, 3)
        ok, png = cv2.imencode(".png", written[name])  # PNG bytes under .jpg: exact decoding
        (root / "JPEGImages" / f"{name}.jpg").write_bytes(png.tobytes())
    (root / "Annotations" / "2008_000001.xml").write_text(
        _xml(("dog", (1, 2, 3, 4)), ("person", (0.5, 1, 4, 5))))
    (root / "Annotations" / "2008_000002.xml").write_text(_xml(("tvmonitor", (2, 2, 3, 3))))
    (root / "Annotations" / "2008_000003.xml").write_text(_xml())
    (root / "ImageSets/Main/train.txt").write_text("2008_000001\n2008_000002\n2008_000003\n")
    (root / "ImageSets/Segmentation/val.txt").write_text("2008_000002\n\n2008_000001\n")
    (root / "ImageSets/Segmentation/train_aug.txt").write_text("2008_000003\n")
    colours = PascalVOC.class_colors
    for name, index in (("2008_000001", 12), ("2008_000002", 20)):
        mask = np.zeros(written[name].shape, np.uint8)
        mask[1:3, 1:3] = colours[index]
        mask[0, :] = (192, 224, 224)  # the boundary colour, in no class
        cv2.imwrite(str(root / "SegmentationClass" / f"{name}.png"), mask)
    cv2.imwrite(str(root / "SegmentationClass_aug" / "2008_000003.png"),
                np.arange(28, dtype=np.uint8).reshape(7, 4) % 21)
    return str(root), written


def test_voc_detection_items(tmp_path):
    root, written = _voc(tmp_path)
    ds = PascalVOC(root, "train", order=["image", "boxes", "boxes_category", "info"])
    assert len(ds) == 3 and ds.file_names == ["2008_000001", "2008_000002", "2008_000003"]
    image, boxes, category, info = ds[0]
    np.testing.assert_array_equal(image, written["2008_000001"])
    assert boxes.dtype == np.float32 and category.dtype == np.int32
    np.testing.assert_array_equal(boxes, [[1, 2, 3, 4], [0.5, 1, 4, 5]])  # difficult kept
    np.testing.assert_array_equal(category, [12, 15])
    assert info == [5, 4, "2008_000001"]
    _, boxes, category, info = ds[-2]
    np.testing.assert_array_equal(boxes, [[2, 2, 3, 3]])
    np.testing.assert_array_equal(category, [20])
    _, boxes, category, info = ds[2]
    assert boxes.shape == (0, 4) and category.shape == (0,) and info == [7, 4, "2008_000003"]


def test_voc_info_without_the_image_and_get_img_info(tmp_path):
    root, _ = _voc(tmp_path)
    ds = PascalVOC(root, "train\n", order=("boxes_category", "info"))  # MegEngine: NameError
    assert ds[1][1] == [6, 4, "2008_000002"]
    assert ds.get_img_info(2) == {"height": 7, "width": 4, "file_name": "2008_000003"}
    assert ds.get_img_info(2) is ds.get_img_info(2)
    ds = PascalVOC(root, "train", order=("info", "boxes", "image"))
    assert ds[0][0] == [5, 4, "2008_000001"] and ds[0][2].shape == (5, 4, 3)


def test_voc_segmentation_masks(tmp_path):
    root, written = _voc(tmp_path)
    ds = PascalVOC(root, "val", order=("image", "mask", "info"))
    assert ds.file_names == ["2008_000002", "2008_000001"]  # the blank line skipped
    image, mask, info = ds[1]
    np.testing.assert_array_equal(image, written["2008_000001"])
    assert mask.shape == (5, 4, 1) and mask.dtype == np.uint8 and info[2] == "2008_000001"
    want = np.zeros((5, 4), np.uint8)
    want[1:3, 1:3], want[0] = 12, 255
    np.testing.assert_array_equal(mask[..., 0], want)
    assert ds[0][1][1, 1, 0] == 20
    aug = PascalVOC(root, "train_aug", order=("mask",))
    np.testing.assert_array_equal(aug[0][0][..., 0], np.arange(28).reshape(7, 4) % 21)


def test_voc_class_tables():
    assert len(PascalVOC.class_names) == 20 and PascalVOC.class_names[-1] == "tvmonitor"
    colours = PascalVOC.class_colors
    assert len(colours) == 21 and colours[0] == [0, 0, 0]
    assert colours[1] == [0, 0, 128] and colours[15] == [128, 128, 192]  # BGR
    assert colours[20] == [128, 64, 0]


def test_voc_bad_orders_and_missing_files_raise(tmp_path):
    root, _ = _voc(tmp_path)
    with pytest.raises(ValueError, match="boxes and a mask"):
        PascalVOC(root, "train", order=("boxes", "mask"))
    with pytest.raises(NotImplementedError, match="neither boxes nor a mask"):
        PascalVOC(root, "train")
    with pytest.raises(NotImplementedError, match="keypoints is unsupported"):
        PascalVOC(root, "train", order=("boxes", "keypoints"))
    with pytest.raises(DatasetNotFoundError, match="not a directory"):
        PascalVOC(str(tmp_path / "absent"), "train", order=("boxes",))
    with pytest.raises(DatasetNotFoundError, match="split file .*test.txt"):
        PascalVOC(root, "test", order=("boxes",))
    os.remove(os.path.join(root, "Annotations", "2008_000002.xml"))
    with pytest.raises(DatasetNotFoundError, match="2008_000002.xml not found"):
        PascalVOC(root, "train", order=("boxes",))[1]


def test_voc_bad_annotations_raise(tmp_path):
    root, _ = _voc(tmp_path)
    path = os.path.join(root, "Annotations", "2008_000001.xml")
    ds = PascalVOC(root, "train", order=("boxes",))
    for text, message in ((_xml(("unicorn", (1, 2, 3, 4))), "'unicorn'"),
                          (_xml(("dog", (1, 2, "x", 4))), "bndbox"),
                          ("<annotation><object>", "not an XML file")):
        with open(path, "w") as f:
            f.write(text)
        with pytest.raises(CheckpointError, match=message):
            ds[0]


# ----- the base class, by MegEngine's module name -------------------------------------------------
def test_vision_dataset_lives_in_meta_vision():
    assert MetaVisionDataset is VisionDataset

    class Pseudo(MetaVisionDataset):  # as MegEngine's model zoo subclasses it
        supported_order = ("image", "boxes", "info")

        def __init__(self, *, order=None):
            super().__init__(None, order=order, supported_order=self.supported_order)

        def __getitem__(self, index):
            return tuple(index for _ in self.order)

        def __len__(self):
            return 2

    assert Pseudo(order=["image", "info"])[1] == (1, 1)
    with pytest.raises(NotImplementedError):
        Pseudo(order=["mask"])
