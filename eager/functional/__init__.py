"""Functional ops, as `import eager.functional as F`, laid out as MegEngine's
`megengine.functional`: `F.elemwise` (elementwise), `F.tensor` (creation, shape and indexing),
`F.math` (reductions, sorting, products), `F.nn` (layers and activations), `F.loss`,
`F.vision` (image functions), `F.metric` (`F.utils` its older path) and `F.distributed` (the
collectives). Their functions are flat names of `F` too, and, as in
MegEngine, of `F.nn`: ported code writes `F.nn.relu`, `F.nn.conv2d` and `F.nn.sum` alike.

>>> import eager as eg, eager.functional as F
>>> F.relu(eg.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
>>> F.nn.sum is F.sum is F.math.sum and F.loss.cross_entropy is F.cross_entropy
True
"""

from typing import TYPE_CHECKING

from . import distributed as distributed
from . import elemwise as elemwise
from . import loss as loss
from . import math as math
from . import metric as metric
from . import nn as nn
from . import quantized as quantized
from . import tensor as tensor
from . import utils as utils
from . import vision as vision
from .elemwise import *  # noqa: F403
from .loss import *  # noqa: F403
from .math import *  # noqa: F403
from .metric import *  # noqa: F403
from .nn import *  # noqa: F403
from .tensor import *  # noqa: F403
from .vision import *  # noqa: F403

if not TYPE_CHECKING:  # mypy reads only a literal `__all__`; without one it exports every name
    __all__ = ["nn", "loss", "vision", *sorted({
        *elemwise.__all__, *tensor.__all__, *math.__all__, *nn.__all__, *loss.__all__,
        *vision.__all__, *metric.__all__})]
