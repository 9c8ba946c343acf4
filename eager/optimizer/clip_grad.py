"""Gradient clipping (MegEngine's `megengine.optimizer.clip_grad`): rescale or bound the `.grad`
of parameters in place before a step.

Each is one op over all the gradients (so a compiled step sees it), and rebinds every `.grad`
Tensor to its clipped value, as MegEngine does: code holding a gradient sees the clipped one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..core.creation import zeros
from ..core.errors import OpArgumentError, OpTypeError
from ..core.ops import OPS
from ..core.tensors import Tensor, apply, rebind


def _with_grads(name: str, params: Tensor | Iterable[Tensor]) -> list[Tensor]:
    """The parameters (one Tensor or an iterable of them) whose `.grad` is not None."""
    params = [params] if isinstance(params, Tensor) else list(params)
    for p in params:
        if not isinstance(p, Tensor):
            raise OpTypeError(f"{name}: params must be Tensors, got {type(p).__name__}; pass "
                              "model.parameters() or a list of Tensors")
    return [p for p in params if p.grad is not None]


def _rebind_grads(params: list[Tensor], new: tuple[Tensor, ...]) -> None:
    for p, n in zip(params, new):
        grad = p.grad
        assert grad is not None  # `_with_grads` kept only these
        rebind(grad, n, n._node, n._out_idx)


def _order(ord: Any) -> float:
    value = math.inf if isinstance(ord, str) and ord.lower() == "inf" else ord
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise OpArgumentError(f"clip_grad_norm: ord must be a number > 0 or 'inf', got {ord!r}")
    return float(value)


def clip_grad_norm(params: Tensor | Iterable[Tensor], max_norm: float | Tensor,
                   ord: float | str = 2.0) -> Tensor:
    """Scale the gradients so that their `ord`-norm, taken over all of them as one vector, is at
    most `max_norm` (by min(1, max_norm / (norm + 1e-6))); returns that norm before clipping, a
    0-d Tensor. Parameters whose `.grad` is None are skipped; `ord` may be 'inf'.

    >>> import eager as eg
    >>> p = eg.Parameter([0.0, 0.0])
    >>> p.grad = eg.tensor([3.0, 4.0])
    >>> float(clip_grad_norm([p], max_norm=1.0))
    5.0
    >>> [round(g, 4) for g in p.grad.numpy().tolist()]
    [0.6, 0.8]
    """
    order = _order(ord)
    if not isinstance(max_norm, Tensor) and not max_norm >= 0:
        raise OpArgumentError(f"clip_grad_norm: max_norm must be >= 0, got {max_norm!r}")
    params = _with_grads("clip_grad_norm", params)
    if not params:
        return zeros(())
    out = apply(OPS["clip_grad_norm"], *[p.grad for p in params], max_norm, n=len(params),
                ord=order)
    _rebind_grads(params, out[:-1])
    return out[-1]


def clip_grad_value(params: Tensor | Iterable[Tensor], lower: float | Tensor,
                    upper: float | Tensor) -> None:
    """Clamp every gradient element into [lower, upper], in place; parameters whose `.grad` is
    None are skipped.

    >>> import eager as eg
    >>> p = eg.Parameter([0.0, 0.0, 0.0])
    >>> p.grad = eg.tensor([-2.0, 0.5, 3.0])
    >>> clip_grad_value([p], -1.0, 1.0)
    >>> p.grad.numpy().tolist()
    [-1.0, 0.5, 1.0]
    """
    if not isinstance(lower, Tensor) and not isinstance(upper, Tensor) and not lower <= upper:
        raise OpArgumentError(f"clip_grad_value: lower must be <= upper, got lower={lower!r}, "
                              f"upper={upper!r}")
    params = _with_grads("clip_grad_value", params)
    if params:
        out = apply(OPS["clip_grad_value"], *[p.grad for p in params], lower, upper,
                    n=len(params))
        _rebind_grads(params, out)


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float | Tensor,
                    norm_type: float | str = 2.0) -> Tensor:
    """PyTorch's spelling of `clip_grad_norm`."""
    return clip_grad_norm(parameters, max_norm, norm_type)


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """PyTorch's spelling: clamp every gradient element into [-clip_value, clip_value]."""
    clip_grad_value(parameters, -clip_value, clip_value)


__all__ = ["clip_grad_norm", "clip_grad_value", "clip_grad_norm_", "clip_grad_value_"]
