"""`PascalVOC`: the PASCAL Visual Object Classes images with their object boxes (from the XML
annotations) or their class segmentation masks, in the layout of the VOC devkit."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from ....core.errors import CheckpointError
from ...errors import DatasetNotFoundError
from .meta_vision import PathLike, VisionDataset, read_image

_BOX_CORNERS = ("xmin", "ymin", "xmax", "ymax")


def _palette(n: int) -> list[list[int]]:
    """The VOC colour map's first `n` colours, each as [blue, green, red]: the bits of the
    class index, three at a time from the lowest, go to red, green and blue, from each
    channel's highest bit down."""
    colours = []
    for index in range(n):
        rgb = [0, 0, 0]
        for shift in range(7, -1, -1):
            for channel in range(3):
                rgb[channel] |= (index >> channel & 1) << shift
            index >>= 3
        colours.append(rgb[::-1])
    return colours


class PascalVOC(VisionDataset):
    """PASCAL VOC (`host.robots.ox.ac.uk/pascal/VOC`), read from the devkit's folder of one year
    (`root`, e.g. `VOCdevkit/VOC2012`): the images `JPEGImages/<name>.jpg` of the split
    `image_set` ("train", "val", "trainval", ...), either for detection or for segmentation,
    as `order` says.

    Detection ("boxes" or "boxes_category" in `order`) lists the split in
    `ImageSets/Main/<image_set>.txt` and reads `Annotations/<name>.xml`:

    - "boxes": an (N, 4) float32 array of every object's (xmin, ymin, xmax, ymax), as the file
      gives them (difficult objects included);
    - "boxes_category": an (N,) int32 array of the objects' classes, `class_names`' index + 1.

    Segmentation ("mask" in `order`, which cannot be combined with boxes) lists the split in
    `ImageSets/Segmentation/<image_set>.txt` and reads the mask `SegmentationClass/<name>.png`:
    "mask" is HxWx1 uint8, the class index (0 the background, `class_names`' index + 1 the
    classes) of each pixel's colour in `class_colors` (BGR), 255 for any other colour (the
    boundaries). A split whose name holds "aug" reads `SegmentationClass_aug/<name>.png`,
    whose pixels already are class indices.

    "image" is the image, HxWx3 uint8 in BGR order; "info" `[height, width, name]` (also
    `get_img_info`). The listing is read once, here; files are read as items are.
    """

    supported_order = ("image", "boxes", "boxes_category", "mask", "info")
    class_names = (
        "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
        "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
        "train", "tvmonitor",
    )
    class_colors = _palette(1 + len(class_names))

    def __init__(self, root: PathLike, image_set: str, *,
                 order: Sequence[str] | None = None) -> None:
        super().__init__(root, order=order, supported_order=self.supported_order)
        detection = "boxes" in self.order or "boxes_category" in self.order
        if detection and "mask" in self.order:
            raise ValueError(f"PascalVOC: order={list(self.order)} names boxes and a mask; "
                             "the boxes come from the detection splits (ImageSets/Main), the "
                             "masks from the segmentation ones: make one dataset of each")
        if not detection and "mask" not in self.order:
            raise NotImplementedError(
                f"PascalVOC: order={list(self.order)} names neither boxes nor a mask; add "
                "\"boxes\" / \"boxes_category\" (detection) or \"mask\" (segmentation)")
        if not os.path.isdir(self.root):
            raise DatasetNotFoundError(f"PascalVOC: {self.root} is not a directory; pass root= "
                                       "the devkit's folder of one year, e.g. VOCdevkit/VOC2012")
        self.image_set = image_set
        split = image_set.rstrip("\n")
        kind = "Main" if detection else "Segmentation"
        self.file_names = _listing(os.path.join(self.root, "ImageSets", kind, split + ".txt"))
        self.images = self._paths("JPEGImages", ".jpg")
        if detection:
            self.annotations = self._paths("Annotations", ".xml")
        else:
            self.masks = self._paths("SegmentationClass_aug" if "aug" in image_set
                                     else "SegmentationClass", ".png")
        self.img_infos: dict[int, dict[str, Any]] = {}

    def _paths(self, folder: str, ext: str) -> list[str]:
        return [os.path.join(self.root, folder, name + ext) for name in self.file_names]

    def __getitem__(self, index: int) -> tuple:
        index = range(len(self))[index]
        image = read_image("PascalVOC", self.images[index]) if "image" in self.order else None
        objects = self._objects(index) if hasattr(self, "annotations") else []
        item: list[Any] = []
        for key in self.order:
            if key == "image":
                item.append(image)
            elif key == "boxes":
                item.append(np.array([box for _, box in objects], np.float32).reshape(-1, 4))
            elif key == "boxes_category":
                item.append(np.array([self.class_names.index(name) + 1 for name, _ in objects],
                                     np.int32))
            elif key == "mask":
                item.append(self._mask(index)[:, :, np.newaxis])
            else:
                info = self.get_img_info(index, image)
                item.append([info["height"], info["width"], info["file_name"]])
        return tuple(item)

    def __len__(self) -> int:
        return len(self.images)

    def get_img_info(self, index: int, image: np.ndarray | None = None) -> dict[str, Any]:
        """`{"height", "width", "file_name"}` of item `index`'s image (`file_name` as the split
        lists it, without folder or extension), from `image` when given, otherwise read from
        the file; kept for later calls."""
        if index not in self.img_infos:
            if image is None:
                image = read_image("PascalVOC", self.images[index])
            self.img_infos[index] = {"height": image.shape[0], "width": image.shape[1],
                                     "file_name": self.file_names[index]}
        return self.img_infos[index]

    def _mask(self, index: int) -> np.ndarray:
        path = self.masks[index]
        if "aug" in self.image_set:
            return read_image("PascalVOC", path, cv2.IMREAD_GRAYSCALE)
        return self._trans_mask(read_image("PascalVOC", path))

    def _trans_mask(self, mask: np.ndarray) -> np.ndarray:
        """The HxW uint8 class indices of an HxWx3 BGR colour mask: i where the pixel is
        `class_colors[i]`, 255 elsewhere. (MegEngine's name: a subclass may override it for
        another palette.)"""
        label = np.full(mask.shape[:2], 255, np.uint8)
        for index, colour in enumerate(self.class_colors):
            label[(mask == np.asarray(colour, mask.dtype)).all(axis=-1)] = index
        return label

    def _objects(self, index: int) -> list[tuple[str, list[float]]]:
        """(class name, [xmin, ymin, xmax, ymax]) of each object of item `index`'s XML file."""
        path = self.annotations[index]
        try:
            root = ET.parse(path).getroot()
        except FileNotFoundError:
            raise DatasetNotFoundError(f"PascalVOC: {path} not found; the split "
                                       f"{self.image_set} lists {self.file_names[index]}, whose "
                                       "annotation it is") from None
        except ET.ParseError as e:
            raise CheckpointError(f"PascalVOC: {path} is not an XML file ({e})") from None
        objects = []
        for obj in root.findall("object"):
            name = (obj.findtext("name") or "").strip()
            corners = [obj.findtext(f"bndbox/{corner}") for corner in _BOX_CORNERS]
            try:
                box = [float(c or "") for c in corners]
            except ValueError:
                box = []
            if name not in self.class_names or not box:
                raise CheckpointError(
                    f"PascalVOC: an object in {path} has name {name!r} and bndbox {corners}; "
                    f"an object needs one of class_names and four numbers {_BOX_CORNERS}")
            objects.append((name, box))
        return objects


def _listing(path: str) -> list[str]:
    """The names a split file lists, one a line (blank lines skipped)."""
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        raise DatasetNotFoundError(f"PascalVOC: the split file {path} does not exist; "
                                   "image_set names a file of the devkit's ImageSets/Main "
                                   "(detection) or ImageSets/Segmentation (masks)") from None
