"""Parity cases for MegEngine's detection datasets, `COCO`, `Objects365` and `PascalVOC`, and
the module their base comes from (`megengine.data.dataset.vision.meta_vision`), read from tiny
fake datasets each case writes to a fresh temporary folder in the dataset's real layout: a
COCO-style JSON file beside PNG images; a VOC devkit folder (PNG bytes under the `.jpg` names,
so that decoding is exact on both sides' OpenCV).

MegEngine behaviour measured here and deliberately not copied (so left out of the cases, or
kept as `megengine_bug` evidence where MegEngine fails on valid input):
- An image file that is missing or that OpenCV cannot decode is `None` in MegEngine's items;
  here it raises DatasetNotFoundError or CheckpointError, naming the file.
- COCO and Objects365 check an annotation's fields when the dataset is made (an unknown
  `category_id`, a missing `bbox` or `keypoints` the order needs: CheckpointError), where
  MegEngine raises KeyError when the item is read. A missing annotation file raises
  DatasetNotFoundError (a FileNotFoundError, as MegEngine's).
- COCO's annotation polygons (`segmentation`) are dropped on reading, as in MegEngine, whose
  "polygons" reader cannot be reached ("polygons" is not in its `supported_order`).
- PascalVOC skips blank lines of a split file; MegEngine lists them as images named "". It
  raises DatasetNotFoundError for a missing root, where MegEngine raises RuntimeError, and
  CheckpointError for an object of an unknown class (MegEngine: ValueError from
  `tuple.index`).
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
from parity_cases import case


def _pixels(seed: int, *shape: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, shape).astype(np.uint8)


def _items(ds) -> list:
    return [list(ds[i]) for i in range(len(ds))]


# ----- COCO-style files ---------------------------------------------------------------------------
def _kp(visible: int) -> list:
    return [v for i in range(17) for v in (i, 2 * i + 1, 2 if i < visible else 0)]


# Images 7, 3, 12, 5 (ids out of order); categories 18, 1, 90. Image 3: a box and a crowd;
# 5: nothing; 7: a box of no width; 12: two boxes with 4 + 5 visible keypoints.
_ANNOTATIONS = [
    {"id": 1, "image_id": 3, "category_id": 18, "bbox": [1, 2, 3, 4], "iscrowd": 0,
     "keypoints": _kp(12), "segmentation": [[1, 2, 4, 2, 4, 6]], "area": 12.0},
    {"id": 2, "image_id": 3, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 1,
     "keypoints": _kp(17), "segmentation": {"counts": [3, 4], "size": [5, 4]}},
    {"id": 3, "image_id": 7, "category_id": 90, "bbox": [2, 2, 0, 3], "iscrowd": 0,
     "keypoints": _kp(17)},
    {"id": 4, "image_id": 12, "category_id": 1, "bbox": [1.5, 0.5, 2, 2], "iscrowd": 0,
     "keypoints": _kp(4)},
    {"id": 5, "image_id": 12, "category_id": 90, "bbox": [0, 1, 3, 1.25], "iscrowd": 0,
     "keypoints": _kp(5)},
]


def _write_coco(folder: str) -> tuple:
    """The image folder and the annotation file."""
    import cv2

    root = os.path.join(folder, "images")
    os.mkdir(root)
    images = []
    for img_id, (h, w) in ((7, (6, 8)), (3, (5, 4)), (12, (9, 6)), (5, (3, 3))):
        name = f"img{img_id}.png"
        cv2.imwrite(os.path.join(root, name), _pixels(img_id, h, w, 3))
        images.append({"id": img_id, "file_name": name, "height": h, "width": w, "license": 1,
                       "coco_url": f"http://a/{img_id}", "flickr_url": "http://b",
                       "date_captured": "2013-11-14"})
    content = {"info": {"year": 2017}, "images": images, "annotations": _ANNOTATIONS,
               "categories": [{"id": 18, "name": "dog", "supercategory": "animal"},
                              {"id": 1, "name": "person"}, {"id": 90, "name": "toothbrush"}]}
    ann_file = os.path.join(folder, "ann.json")
    with open(ann_file, "w") as f:
        json.dump(content, f)
    return root, ann_file


def _coco_results(ds) -> dict:
    return {"len": len(ds), "ids": ds.ids, "order": list(ds.order), "items": _items(ds),
            "info": [ds.get_img_info(i) for i in range(len(ds))],
            "to_contiguous": ds.json_category_id_to_contiguous_id,
            "to_json": ds.contiguous_category_id_to_json_id, "cats": sorted(ds.cats),
            "imgs": sorted(ds.imgs)}


@case()
def coco_items_in_every_order() -> dict:
    from megengine.data.dataset import COCO

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        return {
            "all": _coco_results(COCO(root, ann_file, order=(
                "image", "boxes", "boxes_category", "keypoints", "info"))),
            "reversed": _coco_results(COCO(root, ann_file, order=[
                "info", "keypoints", "boxes_category", "boxes", "image"])),
            "default": _coco_results(COCO(root, ann_file)),
        }


@case()
def coco_remove_images_without_annotations() -> dict:
    from megengine.data.dataset import COCO

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        return {
            "boxes": _coco_results(COCO(root, ann_file, True, order=(
                "image", "boxes", "boxes_category", "info"))),
            "keypoints": _coco_results(COCO(root, ann_file, True, order=(
                "image", "boxes", "keypoints"))),
            "flag_false": _coco_results(COCO(root, ann_file, False, order=("boxes",))),
        }


@case(megengine_bug="with remove_images_without_annotations=True and an order without "
      "'boxes' / 'boxes_category', COCO drops every annotation's bbox while reading, then "
      "filters on it: KeyError('bbox')")
def coco_remove_images_when_the_order_has_no_boxes() -> dict:
    from megengine.data.dataset import COCO

    want = sorted({a["image_id"] for a in _ANNOTATIONS
                   if a["iscrowd"] == 0 and a["bbox"][2] > 0 and a["bbox"][3] > 0})
    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        ds = COCO(root, ann_file, True, order=("image", "info"))
        return {"got": {"ids": ds.ids, "info": [ds[i][1] for i in range(len(ds))]},
                "want": {"ids": want, "info": [[5, 4, "img3.png"], [9, 6, "img12.png"]]}}


@case()
def coco_unsupported_order_raises() -> dict:
    from megengine.data.dataset import COCO

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        return {"len": len(COCO(root, ann_file, order=("image", "polygons")))}


@case()
def coco_mask_order_raises() -> dict:
    from megengine.data.dataset import COCO

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        return {"len": len(COCO(root, ann_file, order=("image", "mask")))}


@case()
def coco_unknown_category_raises() -> dict:
    from megengine.data.dataset import COCO

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        with open(ann_file) as f:
            content = json.load(f)
        content["annotations"][0]["category_id"] = 2
        with open(ann_file, "w") as f:
            json.dump(content, f)
        return {"items": _items(COCO(root, ann_file, order=("boxes_category",)))}


@case()
def coco_class_tables() -> dict:
    from megengine.data.dataset import COCO

    return {"class_names": list(COCO.class_names), "classes_originID": COCO.classes_originID,
            "keypoint_names": list(COCO.keypoint_names),
            "supported_order": list(COCO.supported_order)}


# ----- Objects365 ---------------------------------------------------------------------------------
@case()
def objects365_items_and_filter() -> dict:
    from megengine.data.dataset import Objects365

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        order = ("image", "boxes", "boxes_category", "info")
        return {"all": _coco_results(Objects365(root, ann_file, order=order)),
                "removed": _coco_results(Objects365(root, ann_file, True, order=order))}


@case()
def objects365_keypoints_order_raises() -> dict:
    from megengine.data.dataset import Objects365

    with tempfile.TemporaryDirectory() as folder:
        root, ann_file = _write_coco(folder)
        return {"len": len(Objects365(root, ann_file, order=("image", "keypoints")))}


@case()
def objects365_class_tables() -> dict:
    from megengine.data.dataset import Objects365

    return {"class_names": list(Objects365.class_names),
            "supported_order": list(Objects365.supported_order),
            "has_origin_ids": hasattr(Objects365, "classes_originID")}


# ----- Pascal VOC ---------------------------------------------------------------------------------
_VOC_NAMES = ("2008_000001", "2008_000002", "2008_000003")
_VOC_SHAPES = {"2008_000001": (5, 4), "2008_000002": (6, 7), "2008_000003": (7, 4)}


def _xml(*objects: tuple) -> str:
    parts = "".join(
        f"<object><name>{name}</name><pose>Left</pose><truncated>0</truncated>"
        f"<difficult>{i % 2}</difficult><bndbox><xmin>{box[0]}</xmin><ymin>{box[1]}</ymin>"
        f"<xmax>{box[2]}</xmax><ymax>{box[3]}</ymax></bndbox></object>"
        for i, (name, box) in enumerate(objects))
    return ("<annotation>\n  <folder>VOC2012</folder>\n  <filename>x.jpg</filename>\n"
            "  <size><width>4</width><height>5</height><depth>3</depth></size>\n"
            f"  <segmented>0</segmented>\n  {parts}\n</annotation>\n")


def _write_voc(folder: str) -> str:
    """A devkit year folder: three images; detection annotations (two objects, one, none);
    colour masks for the "val" split, index masks for "train_aug"."""
    import cv2
    from megengine.data.dataset import PascalVOC

    root = os.path.join(folder, "VOC2012")
    for sub in ("JPEGImages", "Annotations", "ImageSets/Main", "ImageSets/Segmentation",
                "SegmentationClass", "SegmentationClass_aug"):
        os.makedirs(os.path.join(root, sub))
    for i, name in enumerate(_VOC_NAMES):
        _, png = cv2.imencode(".png", _pixels(i, *_VOC_SHAPES[name], 3))
        with open(os.path.join(root, "JPEGImages", name + ".jpg"), "wb") as f:
            f.write(png.tobytes())
    xmls = (_xml(("dog", (1, 2, 3, 4)), ("person", ("0.5", " 1 ", 4, 5))),
            _xml(("tvmonitor", (2, 2, 3, 3)), ("aeroplane", (0, 0, 6, 5)),
                 ("aeroplane", (1, 1, 2, 2))), _xml())
    for name, text in zip(_VOC_NAMES, xmls):
        with open(os.path.join(root, "Annotations", name + ".xml"), "w") as f:
            f.write(text)
    splits = {"Main/train.txt": _VOC_NAMES, "Main/val.txt": _VOC_NAMES[1:],
              "Segmentation/val.txt": _VOC_NAMES[1::-1],
              "Segmentation/train_aug.txt": _VOC_NAMES[2:]}
    for path, names in splits.items():
        with open(os.path.join(root, "ImageSets", path), "w") as f:
            f.write("".join(n + "\n" for n in names))
    colours = PascalVOC.class_colors
    for name, index in (("2008_000001", 12), ("2008_000002", 20)):
        mask = np.zeros(_VOC_SHAPES[name] + (3,), np.uint8)
        mask[1:3, 1:3] = colours[index]
        mask[3:, :2] = colours[1]
        mask[0] = (192, 224, 224)  # the boundary colour, of no class
        cv2.imwrite(os.path.join(root, "SegmentationClass", name + ".png"), mask)
    cv2.imwrite(os.path.join(root, "SegmentationClass_aug", "2008_000003.png"),
                (np.arange(28).reshape(7, 4) % 22).astype(np.uint8))
    return root


@case()
def voc_detection_items() -> dict:
    from megengine.data.dataset import PascalVOC

    out = {}
    with tempfile.TemporaryDirectory() as folder:
        root = _write_voc(folder)
        for split, order in (("train", ["image", "boxes", "boxes_category", "info"]),
                             ("val", ("image", "boxes_category", "boxes")),
                             ("train", ("image", "info", "boxes"))):
            ds = PascalVOC(root, split, order=order)
            out[f"{split} {','.join(order)}"] = {
                "len": len(ds), "items": _items(ds), "file_names": ds.file_names,
                "info": [ds.get_img_info(i) for i in range(len(ds))]}
    return out


@case()
def voc_segmentation_masks() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        root = _write_voc(folder)
        val = PascalVOC(root, "val", order=("image", "mask", "info"))
        aug = PascalVOC(root, "train_aug", order=["mask", "image"])
        return {"val": _items(val), "aug": _items(aug), "val_names": val.file_names,
                "info": val.get_img_info(1)}


@case(megengine_bug="PascalVOC's 'info' reads the image 'image' decoded earlier in the same "
      "item: with 'info' but no 'image' before it in the order, UnboundLocalError")
def voc_info_without_the_image() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        root = _write_voc(folder)
        ds = PascalVOC(root, "train", order=("boxes_category", "info"))
        return {"got": [ds[i][1] for i in range(len(ds))],
                "want": [list(_VOC_SHAPES[n]) + [n] for n in _VOC_NAMES]}


@case()
def voc_get_img_info_alone() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        root = _write_voc(folder)
        ds = PascalVOC(root, "train\n", order=("boxes",))
        return {"info": [ds.get_img_info(i) for i in (2, 0)], "image_set": ds.image_set,
                "len": len(ds)}


@case()
def voc_boxes_with_mask_raises() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        return {"len": len(PascalVOC(_write_voc(folder), "val", order=("boxes", "mask")))}


@case()
def voc_without_order_raises() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        return {"len": len(PascalVOC(_write_voc(folder), "train"))}


@case()
def voc_missing_root_raises() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        return {"len": len(PascalVOC(os.path.join(folder, "absent"), "train",
                                     order=("boxes",)))}


@case()
def voc_missing_split_raises() -> dict:
    from megengine.data.dataset import PascalVOC

    with tempfile.TemporaryDirectory() as folder:
        return {"len": len(PascalVOC(_write_voc(folder), "test", order=("boxes",)))}


@case()
def voc_class_tables() -> dict:
    from megengine.data.dataset import PascalVOC

    return {"class_names": list(PascalVOC.class_names), "class_colors": PascalVOC.class_colors,
            "supported_order": list(PascalVOC.supported_order)}


# ----- the base class, by MegEngine's module name -------------------------------------------------
@case()
def meta_vision_subclass() -> dict:
    from megengine.data.dataset import VisionDataset as Exported
    from megengine.data.dataset.vision.meta_vision import VisionDataset

    class Pseudo(VisionDataset):  # as MegEngine's model zoo subclasses it
        supported_order = ("image", "boxes", "boxes_category", "info")

        def __init__(self, length: int = 3, *, order=None) -> None:
            super().__init__(None, order=order, supported_order=self.supported_order)
            self.length = length

        def __getitem__(self, index: int) -> tuple:
            return tuple(np.full(2, index, np.int32) for _ in self.order)

        def __len__(self) -> int:
            return self.length

    ds = Pseudo(order=["image", "info"])
    return {"same": VisionDataset is Exported, "items": _items(ds), "order": list(ds.order),
            "root": ds.root}
