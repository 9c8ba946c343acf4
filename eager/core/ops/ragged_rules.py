"""How an op runs on tensors whose axis 0 is ragged (`eager/core/ragged.py`): the values of
`defop(..., ragged=...)`, declared beside each op's definition."""

from collections.abc import Callable
from typing import Any

ROWS = "rows"  # row-independent along axis 0: runs on the padded storage, its output ragged
HEAVY_ROWS = "heavy rows"  # ROWS, each row costly: eager code runs it only up to the length's
# capacity rung (a host read of the length), not on the whole padded storage
WIDE_ROWS = "wide rows"  # ROWS, each row a large matmul: run only up to a fine rung of the
# length (at most 1/8 more rows) when eager code has read the length already; no read of its own
MASKED = "masked"  # a reduction over axis 0 whose second input is a validity mask
LOSS = "loss"  # a loss: its reduction="none" form is ROWS, then a masked mean / sum
SOURCE = "source"  # ROWS for indexing ops, whose first input may also be read at given rows
NONEMPTY = "nonempty"  # MASKED for a reduction without an identity (max, argmax): on an empty
# selection it raises as on the exact array (eager code reads a length kept on the device)


def touches_rows(axis: Any, ndim: int) -> bool:
    """Whether axes `axis` (None: all, an int or a tuple) include axis 0 of `ndim` axes."""
    if axis is None:
        return True
    axes = axis if isinstance(axis, tuple) else (axis,)
    return any(a % max(ndim, 1) == 0 for a in axes)


def along(attr: str = "axis", inside: str | None = MASKED,
          outside: str | None = ROWS) -> Callable[[dict, int], str | None]:
    """A rule for ops with an axis attribute: `inside` when it touches axis 0 (None: the op
    needs the exact array), `outside` otherwise."""
    def rule(attrs: dict, ndim: int) -> str | None:
        return inside if touches_rows(attrs.get(attr), ndim) else outside
    return rule


def indexing(attrs: dict, ndim: int) -> str | None:
    """getitem: SOURCE unless the index slices axis 0 of its first input (`x[1:3]`, `x[::-1]`:
    which rows stay depends on the length; those run on the exact array)."""
    spec = attrs["spec"]
    consumed = sum(item is not None and item is not Ellipsis for item in spec)
    for item in spec:
        if item is Ellipsis and ndim > consumed:
            return SOURCE  # the ellipsis covers axis 0
        if item is not None and item is not Ellipsis:
            full = not isinstance(item, tuple) or item == ("slice", None, None, None)
            return SOURCE if full else None
    return SOURCE


def unless_reduced(attrs: dict, ndim: int) -> str:
    """A loss: ROWS when it keeps one value per element (reduction="none"), else LOSS."""
    return ROWS if attrs.get("reduction") == "none" else LOSS
