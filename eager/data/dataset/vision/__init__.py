"""Image datasets: class folders (`ImageFolder`), MNIST and CIFAR-10/100 read from their
distribution files, and their base `VisionDataset`."""

from .base import VisionDataset as VisionDataset
from .cifar import CIFAR10 as CIFAR10
from .cifar import CIFAR100 as CIFAR100
from .folder import ImageFolder as ImageFolder
from .mnist import MNIST as MNIST

__all__ = ["CIFAR10", "CIFAR100", "MNIST", "ImageFolder", "VisionDataset"]
