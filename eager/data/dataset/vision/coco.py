"""`COCO`: MS COCO's images with their object boxes, categories and person keypoints, read from
an annotation file in COCO's JSON format; `CocoJsonDataset` reads that format for it and for
`Objects365`."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ....core.errors import CheckpointError
from ...errors import DatasetNotFoundError
from .meta_vision import PathLike, VisionDataset, read_image

_IMAGE_KEYS = {"image": ("file_name",), "info": ("file_name", "height", "width")}
_ANNOTATION_KEYS = {"boxes": ("bbox",), "boxes_category": ("category_id",),
                    "keypoints": ("keypoints",)}


class CocoJsonDataset(VisionDataset):
    """Images listed in a COCO-style JSON annotation file (`{"images": [...], "annotations":
    [...], "categories": [...]}`), one item per image, in increasing order of image id; an item
    holds the fields `order` names, each over all of the image's annotations:

    - "image": the file `root/<file_name>`, HxWx3 uint8 in BGR order (as `cv2.imread` gives it);
    - "boxes": an (N, 4) float32 array of (x0, y0, x1, y1), from the file's (x, y, w, h);
    - "boxes_category": an (N,) int32 array of categories numbered 1, 2, ... in increasing order
      of the file's category ids (`json_category_id_to_contiguous_id`; 0 is left for the
      background);
    - "info": `[height, width, file_name]` from the file.

    `remove_images_without_annotations=True` (for training) first drops crowd annotations
    (`iscrowd` true) and boxes of no width or height, then the images left with no annotation.
    Otherwise every image is an item and keeps all its annotations, crowds included.

    The file is read once, here; images are decoded as items are read. Annotation polygons
    (`segmentation`) are not kept.
    """

    supported_order: tuple[str, ...] = ("image", "boxes", "boxes_category", "info")
    # image fields dropped on reading, which only cost memory (and pickling to loader workers)
    _unused_image_keys: tuple[str, ...] = ()

    def __init__(self, root: PathLike, ann_file: PathLike,
                 remove_images_without_annotations: bool = False, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(root, order=order, supported_order=self.supported_order)
        name = type(self).__name__
        content = _load(name, os.fspath(ann_file))
        image_keys = {"id"}.union(*(_IMAGE_KEYS.get(key, ()) for key in self.order))
        self.imgs: dict[Any, dict[str, Any]] = {}
        for img in _entries(name, ann_file, content, "images", image_keys):
            self.imgs[img["id"]] = {k: v for k, v in img.items()
                                    if k not in self._unused_image_keys}
        self.cats = {cat["id"]: cat for cat in _entries(name, ann_file, content, "categories",
                                                         {"id"})}
        ann_keys = {"image_id"}.union(*(_ANNOTATION_KEYS.get(key, ()) for key in self.order))
        if remove_images_without_annotations:
            ann_keys |= {"iscrowd", "bbox"}
        self.img_to_anns: defaultdict[Any, list[dict[str, Any]]] = defaultdict(list)
        for ann in _entries(name, ann_file, content, "annotations", ann_keys):
            ann.pop("segmentation", None)
            self.img_to_anns[ann["image_id"]].append(ann)
        self.json_category_id_to_contiguous_id = {
            cat_id: i + 1 for i, cat_id in enumerate(sorted(self.cats))}
        self.contiguous_category_id_to_json_id = {
            v: k for k, v in self.json_category_id_to_contiguous_id.items()}
        if "boxes_category" in self.order:
            self._check_categories(ann_file)
        self.ids = sorted(self.imgs)
        if remove_images_without_annotations:
            self._remove_unannotated()

    def _check_categories(self, ann_file: PathLike) -> None:
        for anns in self.img_to_anns.values():
            for ann in anns:
                if ann["category_id"] not in self.cats:
                    raise CheckpointError(
                        f"{type(self).__name__}: an annotation in {ann_file} (id "
                        f"{ann.get('id')}) has category_id {ann['category_id']}, which "
                        f"\"categories\" does not list (it lists {sorted(self.cats)})")

    def _remove_unannotated(self) -> None:
        kept = []
        for img_id in self.ids:
            anns = [ann for ann in self.img_to_anns.get(img_id, ())
                    if ann["iscrowd"] == 0 and ann["bbox"][2] > 0 and ann["bbox"][3] > 0]
            if self._trainable(anns):
                kept.append(img_id)
                self.img_to_anns[img_id] = anns
            else:
                del self.imgs[img_id]
                self.img_to_anns.pop(img_id, None)
        self.ids = kept

    def _trainable(self, anns: list[dict[str, Any]]) -> bool:
        """Whether an image whose usable annotations are `anns` is kept for training."""
        return len(anns) > 0

    def __getitem__(self, index: int) -> tuple:
        img_id = self.ids[index]
        anns = self.img_to_anns.get(img_id, [])
        return tuple(self._field(key, img_id, anns) for key in self.order)

    def _field(self, key: str, img_id: Any, anns: list[dict[str, Any]]) -> Any:
        img = self.imgs[img_id]
        if key == "image":
            return read_image(type(self).__name__, os.path.join(self.root, img["file_name"]))
        if key == "boxes":
            boxes = np.array([ann["bbox"] for ann in anns], np.float32).reshape(-1, 4)
            boxes[:, 2:] += boxes[:, :2]
            return boxes
        if key == "boxes_category":
            to_contiguous = self.json_category_id_to_contiguous_id
            return np.array([to_contiguous[ann["category_id"]] for ann in anns], np.int32)
        assert key == "info", f"{key} passed the supported_order check but has no reader"
        return [img["height"], img["width"], img["file_name"]]

    def __len__(self) -> int:
        return len(self.ids)

    def get_img_info(self, index: int) -> dict[str, Any]:
        """The annotation file's record of item `index`'s image (`file_name`, `height`,
        `width`, `id`, ...): the dict itself, not a copy."""
        return self.imgs[self.ids[index]]


def _load(name: str, ann_file: str) -> dict[str, Any]:
    try:
        with open(ann_file) as f:
            content = json.load(f)
    except FileNotFoundError:
        raise DatasetNotFoundError(f"{name}: the annotation file {ann_file} does not exist; "
                                   "pass ann_file= the path of the dataset's JSON annotations "
                                   "(e.g. annotations/instances_val2017.json for COCO)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{name}: {ann_file} is not a JSON file ({e}); download the "
                              "annotations again") from None
    if not isinstance(content, dict):
        raise CheckpointError(f"{name}: {ann_file} holds a JSON {type(content).__name__}, not "
                              "the object of a COCO-style annotation file")
    return content


def _entries(name: str, ann_file: PathLike, content: dict[str, Any], section: str,
             keys: set[str]) -> list[dict[str, Any]]:
    """`content[section]`, each entry checked to have `keys`."""
    if not isinstance(content.get(section), list):
        raise CheckpointError(f"{name}: {ann_file} has no \"{section}\" list; a COCO-style "
                              "annotation file has \"images\", \"annotations\" and "
                              "\"categories\"")
    entries = content[section]
    for entry in entries:
        missing = keys.difference(entry) if isinstance(entry, dict) else keys
        if missing:
            raise CheckpointError(f"{name}: an entry of \"{section}\" in {ann_file} has no "
                                  f"{', '.join(sorted(missing))}: {str(entry)[:200]}")
    return entries


class COCO(CocoJsonDataset):
    """MS COCO (`cocodataset.org`): images of 80 object categories with boxes, and person
    keypoints, from one of its annotation files.

    `root` is the image folder (`val2017/`), `ann_file` its annotation file
    (`annotations/instances_val2017.json`, or `person_keypoints_val2017.json` for keypoints).
    The fields `order` may name are those of `CocoJsonDataset` and "keypoints": an (N, 17, 3)
    float32 array of (x, y, visibility) in the order of `keypoint_names`. With "keypoints" in
    `order`, `remove_images_without_annotations=True` also drops images with fewer than 10
    visible keypoints (visibility above 0) in all.

    `class_names` are the 80 categories in the order of the contiguous ids 1..80 of the
    official files (`class_names[i - 1]` is category i), `classes_originID` a name's id in the
    files.
    """

    supported_order = ("image", "boxes", "boxes_category", "keypoints", "info")
    _unused_image_keys = ("license", "coco_url", "date_captured", "flickr_url")
    min_keypoints_per_image = 10

    def _trainable(self, anns: list[dict[str, Any]]) -> bool:
        if not anns:
            return False
        if "keypoints" not in self.order:
            return True
        visible = sum(int(v > 0) for ann in anns for v in ann["keypoints"][2::3])
        return visible >= self.min_keypoints_per_image

    def _field(self, key: str, img_id: Any, anns: list[dict[str, Any]]) -> Any:
        if key != "keypoints":
            return super()._field(key, img_id, anns)
        size = 3 * len(self.keypoint_names)
        for ann in anns:
            if len(ann["keypoints"]) != size:
                raise CheckpointError(
                    f"COCO: annotation {ann.get('id')} of image {img_id} has "
                    f"{len(ann['keypoints'])} keypoint values; COCO's are {size}: (x, y, "
                    f"visibility) for each of the {len(self.keypoint_names)} keypoint_names")
        points = np.array([ann["keypoints"] for ann in anns], np.float32)
        return points.reshape(-1, len(self.keypoint_names), 3)

    class_names = (
        "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
        "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat",
        "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack",
        "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball",
        "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket",
        "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
        "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair",
        "couch", "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse",
        "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
        "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier",
        "toothbrush",
    )
    # the official files number the 80 categories from 1 to 90, leaving 10 numbers unused
    classes_originID = dict(zip(class_names, (  # noqa: N815 - MegEngine's name, which the zoo reads
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27,
        28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52,
        53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78,
        79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90), strict=True))
    keypoint_names = (
        "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder",
        "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip",
        "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle",
    )
