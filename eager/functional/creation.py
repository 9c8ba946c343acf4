"""Creation functions under `F`, as MegEngine spells them (`F.zeros`, `F.arange`, `F.linspace`,
...): the same functions as `eg.zeros` and co., defined once in `eager.creation`.

>>> import eager.functional as F
>>> F.full((2,), 7).tolist(), F.arange(3).tolist()
([7, 7], [0.0, 1.0, 2.0])
"""

from ..creation import (
    arange,
    eye,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)

__all__ = ["zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "linspace",
           "eye"]
