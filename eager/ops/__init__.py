"""The op registry. `OPS` maps each op's name to its `Op`; the submodules register them."""

from . import elementwise, nn, random, reduction, shape, updates  # noqa: F401  (they register the ops)
from .registry import OPS as OPS
from .registry import Op as Op
from .registry import defop as defop
