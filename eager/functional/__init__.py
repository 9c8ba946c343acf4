"""Functional ops, as `import eager.functional as F`: flat names plus MegEngine's `F.nn` and
`F.loss` namespaces holding the same functions.

>>> import eager as eg, eager.functional as F
>>> F.relu(eg.tensor([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
"""

from . import loss as loss
from . import nn as nn
from .creation import *  # noqa: F403
from .loss import *  # noqa: F403
from .math import *  # noqa: F403
from .nn import *  # noqa: F403
from .shape import *  # noqa: F403
