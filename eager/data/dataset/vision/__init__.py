"""Image datasets: class folders (`ImageFolder`, and `ImageNet`'s extracted ILSVRC2012 folders),
MNIST and CIFAR-10/100 read from their distribution files, the detection datasets COCO,
Objects365 and Pascal VOC read from their annotation files, and their base `VisionDataset`."""

from .cifar import CIFAR10 as CIFAR10
from .cifar import CIFAR100 as CIFAR100
from .coco import COCO as COCO
from .folder import ImageFolder as ImageFolder
from .imagenet import ImageNet as ImageNet
from .meta_vision import VisionDataset as VisionDataset
from .mnist import MNIST as MNIST
from .objects365 import Objects365 as Objects365
from .voc import PascalVOC as PascalVOC

__all__ = ["CIFAR10", "CIFAR100", "MNIST", "ImageFolder", "ImageNet", "VisionDataset", "COCO",
           "Objects365", "PascalVOC"]
