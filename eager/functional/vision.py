"""MegEngine's `F.vision` namespace, for ported code (`F.vision.interpolate(x, scale_factor=2)`):
the image functions this project has, which are also flat names of `eager.functional`."""

from .detection import nms, roi_align, roi_pooling
from .neural import interpolate

__all__ = ["interpolate", "roi_align", "roi_pooling", "nms"]
