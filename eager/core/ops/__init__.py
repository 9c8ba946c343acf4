"""The op registry. `OPS` maps each op's name to its `Op`; the submodules register them."""

from . import (  # noqa: F401  (they register the ops)
    collective,
    color,
    conv,
    correlation,
    ctc,
    deformable,
    detection,
    elementwise,
    linalg,
    losses,
    nn,
    norm,
    quantize,
    quantized,
    ragged_ops,
    random,
    reduction,
    shape,
    sorting,
    updates,
    vision,
    warp,
)
from .registry import OPS as OPS
from .registry import Op as Op
from .registry import defop as defop

for _op in OPS.values():  # the built-in ops: their programs may be kept on disk by name
    if not _op.per_rank:  # (a collective's program is built for the ranks of one run)
        _op.persist = (_op.name,)
