"""Functional ops, as `import eager.functional as F`: flat names plus MegEngine's `F.nn` and
`F.loss` namespaces. `F.nn` holds every flat name (ported code writes `F.nn.relu`,
`F.nn.conv2d` and `F.nn.sum` alike); `F.loss` the losses; `F.vision` the image functions.

>>> import eager as eg, eager.functional as F
>>> F.relu(eg.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
>>> F.nn.sum is F.sum and F.loss.cross_entropy is F.cross_entropy
True
"""

from typing import TYPE_CHECKING

from . import loss as loss
from . import nn as nn
from . import vision as vision
from .nn import *  # noqa: F403

if not TYPE_CHECKING:  # as in nn.py: mypy would read a computed `__all__` as exporting nothing
    __all__ = ["nn", "loss", "vision", *nn.__all__]
