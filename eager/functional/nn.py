"""MegEngine's `F.nn` namespace: every flat functional name, so ported code that writes
`F.nn.relu`, `F.nn.conv2d` or `F.nn.sum` runs unchanged. Only re-exports: the functions live
in the modules beside this one."""

from typing import TYPE_CHECKING

from . import (
    creation,
    ctc,
    deformable,
    detection,
    linalg,
    loss,
    math,
    neural,
    shape,
    vision,
    vision_ops,
)
from .creation import *  # noqa: F403
from .ctc import *  # noqa: F403
from .deformable import *  # noqa: F403
from .detection import *  # noqa: F403
from .linalg import *  # noqa: F403
from .loss import *  # noqa: F403
from .math import *  # noqa: F403
from .neural import *  # noqa: F403
from .shape import *  # noqa: F403
from .vision import *  # noqa: F403
from .vision_ops import *  # noqa: F403

if not TYPE_CHECKING:  # mypy reads only a literal `__all__`; without one it exports every name
    __all__ = sorted({*creation.__all__, *linalg.__all__, *loss.__all__, *math.__all__,
                      *neural.__all__, *shape.__all__, *ctc.__all__, *vision_ops.__all__,
                      *detection.__all__, *deformable.__all__, *vision.__all__})
