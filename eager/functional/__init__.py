"""Functional ops, as `import eager.functional as F`: flat names plus MegEngine's `F.nn` and
`F.loss` namespaces. `F.nn` holds every flat name (ported code writes `F.nn.relu`,
`F.nn.conv2d` and `F.nn.softmax` alike); `F.loss` the losses.

>>> import eager as eg, eager.functional as F
>>> F.relu(eg.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
>>> F.nn.sum is F.sum and F.loss.cross_entropy is F.cross_entropy
True
"""

from . import creation, math, shape
from . import loss as loss
from . import nn as nn
from .creation import *  # noqa: F403
from .loss import *  # noqa: F403
from .math import *  # noqa: F403
from .nn import *  # noqa: F403
from .shape import *  # noqa: F403

_FLAT = sorted({*creation.__all__, *loss.__all__, *math.__all__, *nn.__all__, *shape.__all__})
for _name in _FLAT:
    setattr(nn, _name, globals()[_name])
nn.__all__ = _FLAT
__all__ = ["nn", "loss", *_FLAT]
del _name
