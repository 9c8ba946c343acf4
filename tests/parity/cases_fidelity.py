"""Parity cases for the last MegEngine differences found by running its own tests and the
op-by-op comparison here: GradManager groups, regions returning data-dependent sizes, dtypes
and layouts where MegEngine's convention differs from PyTorch's, optimizer state dicts, amp
and two of `megengine.data`'s."""

from __future__ import annotations

import numpy as np
from parity_cases import case


def _x() -> np.ndarray:
    return np.linspace(-1.0, 2.0, 9, dtype="float32").reshape(3, 3)


@case()
def grad_manager_group_records_as_one() -> dict:
    """MegEngine's group-visibility test: neither manager of `gm | gm2` records the other's
    backward, so `gm.backward(x.grad)` finds nothing to differentiate."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(_x())
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm | gm2:
        y = F.cos(x)
        gm2.backward(y, F.ones_like(y))
        first = x.grad.numpy()
        gm.backward(x.grad, F.ones_like(x.grad))
    return {"first": first, "after": x.grad.numpy()}


@case()
def grad_manager_order_decides_who_records_whom() -> dict:
    """Entered first, a manager records the later one's backward; a group inside it too."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(_x())
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm2:
        with gm:
            y = F.cos(x)
            gm.backward(y, F.ones_like(y))
        gm2.backward(x.grad, F.ones_like(x.grad))
    nested = x.grad.numpy()
    z = mge.tensor(_x())
    outer, a, b = (GradManager().attach(z) for _ in range(3))
    with outer:
        with a | b:
            y = F.cos(z)
            b.backward(y, F.ones_like(y))
            a.backward(z.grad, F.ones_like(z.grad))
        outer.backward(z.grad, F.ones_like(z.grad))
    return {"nested": nested, "group_inside": z.grad.numpy()}
