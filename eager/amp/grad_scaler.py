"""`GradScaler` (MegEngine's `megengine.amp.grad_scaler`): loss scaling for float16 training,
with a scale and growth counter held in Tensors so compiled steps update them like any state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import functional as F
from ..core import context
from ..core.amp_policy import skip_next_update
from ..core.tensors import Tensor, rebind


class GradScaler:
    """Loss scaling for float16 training (MegEngine's `amp.GradScaler`).

    Args:
        init_scale: the first scale.
        growth_factor: the scale is multiplied by it after `growth_interval` steps in a row
            whose gradients were all finite.
        backoff_factor: the scale is multiplied by it after a step with an inf or nan gradient.
        growth_interval: see `growth_factor`.

    `backward(gm, loss)` replaces `gm.backward(loss)`: it backpropagates the scaled loss,
    divides the attached gradients by the scale and, where any is inf or nan, sets them all to
    None, so that `opt.step()` skips them, and backs the scale off. Inside a traced region a
    value cannot decide that, so the gradients are zeroed and the next `opt.step()` of those
    parameters keeps the old parameters and optimizer state where the flag is set (a
    `where` in the compiled step).

    >>> import eager as eg
    >>> from eager import amp
    >>> from eager.autodiff import GradManager
    >>> w = eg.Parameter([1.0, 2.0])
    >>> gm, scaler = GradManager().attach([w]), amp.GradScaler(init_scale=1024.0)
    >>> with gm:
    ...     scaler.backward(gm, (w * w).sum())
    >>> w.grad.numpy().tolist(), scaler.scale_factor
    ([2.0, 4.0], 1024.0)
    """

    def __init__(self, init_scale: float = 16.0, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        if not (init_scale > 0 and growth_factor > 1 and 0 < backoff_factor < 1
                and int(growth_interval) == growth_interval and growth_interval >= 1):
            raise ValueError(
                "GradScaler needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
                f"an integer growth_interval >= 1; got {init_scale}, {growth_factor}, "
                f"{backoff_factor}, {growth_interval}")
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self._scale = Tensor(np.float32(init_scale))
        self._tracker = Tensor(np.int32(0))  # finite steps since the scale last changed
        self._found: Tensor | None = None  # set by unscale: a gradient was not finite

    @property
    def scale_factor(self) -> float:
        """The current scale (a value read: not inside a traced region)."""
        return float(self._scale.item())

    def backward(self, gm: Any, y: Tensor | Sequence[Tensor], dy: Any = None,
                 unscale_grad: bool = True, update_scale: bool = True) -> None:
        """`gm.backward(y, dy)` on the loss times the scale; then, with `unscale_grad`,
        `unscale(gm.attached_tensors())` and, with `update_scale` too, `update()`."""
        ys = [y] if isinstance(y, Tensor) else list(y)
        dys = [F.ones_like(t) for t in ys] if dy is None else (
            list(dy) if isinstance(dy, (list, tuple)) else [dy])
        gm.backward(ys, [_cast_like(d * self._scale, t) for d, t in zip(dys, ys)])
        if unscale_grad:
            self.unscale(gm.attached_tensors())
            if update_scale:
                self.update()

    def unscale(self, grad_tensors: Sequence[Tensor]) -> Sequence[Tensor]:
        """Divide the `.grad` of each of `grad_tensors` by the scale; if any is inf or nan, set
        them all to None (inside a traced region: zero them and skip the next optimizer update
        of these tensors). Returns `grad_tensors`."""
        tensors = [t for t in grad_tensors if t is not None and t.grad is not None]
        if not tensors:
            return grad_tensors
        inv = 1.0 / self._scale
        grads = [_cast_like(g * inv, g) for t in tensors if (g := t.grad) is not None]
        total = (grads[0] * 0).sum()  # nan exactly when some gradient has an inf or a nan
        for g in grads[1:]:
            total = total + (g * 0).sum()
        found = F.isnan(total)
        h = context.current()
        if h is None:
            bad = bool(found.item())
            for t, g in zip(tensors, grads):
                t.grad = None if bad else g
        else:
            for t, g in zip(tensors, grads):
                t.grad = F.where(found, F.zeros_like(g), g)
            skip_next_update(h, found, tensors)
        self._found = found
        return grad_tensors

    def update(self, new_scale: float | None = None) -> None:
        """Back the scale off if the last `unscale` found an inf or nan, else grow it after
        `growth_interval` finite steps in a row; or set it to `new_scale`."""
        if new_scale is not None:
            self._assign(new_scale, 0)
            self._found = None
            return
        grown = self._tracker + 1
        grow = grown >= self.growth_interval
        scale = F.where(grow, self._scale * self.growth_factor, self._scale)
        reset = grow
        if self._found is not None:
            scale = F.where(self._found, self._scale * self.backoff_factor, scale)
            reset = F.logical_or(self._found, grow)
        tracker = F.where(reset, F.zeros_like(grown), grown)
        with context.atomic():  # the scale and its counter together
            rebind(self._scale, scale)
            rebind(self._tracker, tracker)
        self._found = None

    def state_dict(self) -> dict[str, Any]:
        """The scale, the factors, the interval and the growth counter (plain Python numbers:
        `eg.save` checkpoints them)."""
        return {"scale_factor": self.scale_factor, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": int(self._tracker.item())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self._assign(state["scale_factor"], state["_growth_tracker"])

    def _assign(self, scale: float, tracker: int) -> None:
        new_scale, new_tracker = Tensor(np.float32(scale)), Tensor(np.int32(tracker))
        with context.atomic():
            rebind(self._scale, new_scale)
            rebind(self._tracker, new_tracker)

    def __repr__(self) -> str:
        return (f"GradScaler(growth_factor={self.growth_factor}, backoff_factor="
                f"{self.backoff_factor}, growth_interval={self.growth_interval})")


def _cast_like(x: Tensor, like: Tensor) -> Tensor:
    return x if x.dtype == like.dtype else x.astype(like.dtype)


__all__ = ["GradScaler"]
