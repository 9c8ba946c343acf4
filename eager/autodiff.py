"""Autodiff front-end: `GradManager` (MegEngine's), custom `Function` nodes and `no_grad`.

>>> import eager as eg
>>> from eager.autodiff import GradManager
>>> w = eg.Parameter([1.0, 2.0])
>>> gm = GradManager().attach([w])
>>> with gm:
...     loss = (w * w).sum()
...     gm.backward(loss)
>>> w.grad.numpy().tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from . import context, hooks, tape
from .errors import BackwardError
from .tensor import Tensor, _wrap, read

Callback = Callable[[Tensor, Tensor], Tensor]


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Ops inside the block are not recorded, even while a GradManager records."""
    tape.change(paused=1)
    try:
        yield
    finally:
        tape.change(paused=-1)


def _as_list(x: Any) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


class GradManager:
    """Records the operations on attached tensors and computes their gradients.

    Attach tensors (parameters, or any tensor you want a gradient for) with `attach`; ops on them
    are recorded while the manager records (`record()` ... `release()`, or `with gm:`).
    `backward(y, dy)` computes the gradients, passes each through the tensor's callbacks in order,
    accumulates the result into `tensor.grad`, frees the recorded graph and stops recording.
    """

    def __init__(self) -> None:
        self._attached: dict[int, tuple[Tensor, list[Callback]]] = {}
        self._recording = False
        self.version = 0  # moves on every attach: compiled steps that run backward re-check
        if (h := context.current()) is not None:
            h.manager_created(self)

    def attach(self, tensors: Tensor | Iterable[Tensor],
               callbacks: Callback | Sequence[Callback] | None = None) -> GradManager:
        """Track `tensors` (a Tensor or a list); `callbacks(tensor, grad) -> grad` run in order
        on each gradient before it is accumulated. Returns self."""
        self.version += 1
        for t in _as_list(tensors) if not isinstance(tensors, Tensor) else [tensors]:
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"GradManager.attach takes Tensors, got {type(t).__name__}: {t!r:.60}")
            entry = self._attached.get(id(t))
            if entry is None:
                self._attached[id(t)] = (t, list(_as_list(callbacks)))
                if self._recording:
                    t._tracked += 1
            else:
                entry[1].extend(_as_list(callbacks))
        return self

    def attached_tensors(self) -> list[Tensor]:
        """The attached tensors, in attach order."""
        return [t for t, _ in self._attached.values()]

    def record(self) -> None:
        """Start recording operations on attached tensors."""
        if self._recording:
            raise BackwardError("GradManager.record() called while it is already recording")
        self._recording = True
        tape.change(recording=1)
        for t, _ in self._attached.values():
            t._tracked += 1
        if (h := context.current()) is not None:
            h.recording(self, True)

    def release(self) -> None:
        """Stop recording (idempotent). Graph nodes die with the tensors that hold them."""
        if not self._recording:
            return
        self._recording = False
        tape.change(recording=-1)
        for t, _ in self._attached.values():
            t._tracked -= 1
        if (h := context.current()) is not None:
            h.recording(self, False)

    def __enter__(self) -> GradManager:
        self.record()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def backward(self, y: Tensor | Sequence[Tensor] | None = None,
                 dy: Tensor | Sequence[Tensor] | None = None) -> None:
        """Accumulate d(y)/d(attached) into each attached tensor's `.grad`, weighting by `dy`.

        `dy` may be omitted only when each `y` has exactly one element (it is then 1).
        """
        if not self._recording:
            raise BackwardError(
                "GradManager.backward() needs a recording manager: call it inside `with gm:` "
                "or between gm.record() and gm.release()"
            )
        h = context.current()
        if h is not None:
            h.backward(self, y, dy)
        ys, dys = _as_list(y), _as_list(dy)
        if dys and len(dys) != len(ys):
            raise ValueError(f"backward got {len(ys)} outputs but {len(dys)} output gradients")
        try:
            cts = [self._cotangent(t, dys[i] if dys else None) for i, t in enumerate(ys)]
            leaves = tape.backward(ys, cts)
            self._accumulate(leaves)
        finally:
            self.release()

    @staticmethod
    def _cotangent(y: Tensor, dy: Any) -> Any:
        if not isinstance(y, Tensor):
            raise TypeError(f"backward expects Tensors, got {type(y).__name__}")
        if dy is None:
            if y.size != 1:
                raise ValueError(
                    f"backward(y) without dy needs a one-element y, got shape {y.shape}; "
                    "pass dy (e.g. eg.ones_like(y)) or reduce y to a scalar first"
                )
            return jnp.ones(y.shape, y.dtype)
        ct = read(dy) if isinstance(dy, Tensor) else jnp.asarray(np.asarray(dy), y.dtype)
        if tuple(ct.shape) != y.shape:
            raise ValueError(f"dy has shape {tuple(ct.shape)} but y has shape {y.shape}")
        return ct

    def _accumulate(self, leaves: dict[int, list]) -> None:
        with context.atomic():  # every .grad written, or (Ctrl-C before) none
            self._accumulate_all(leaves)

    def _accumulate_all(self, leaves: dict[int, list]) -> None:
        for key, (t, callbacks) in self._attached.items():
            found = leaves.get(key)
            if found is None or found[0] is not t:
                continue
            grad = _wrap(found[1])
            if callbacks:
                with no_grad():
                    for cb in callbacks:
                        grad = cb(t, grad)
            old = t.grad
            if old is not None:
                with no_grad():
                    grad = old + grad
            t.grad = grad


class Function:
    """A custom grad node: subclass with `forward(self, *inputs)` and `backward(self, *grads)`.

    `forward` runs without recording and returns a Tensor or a tuple of Tensors; `backward`
    receives one gradient per output (zeros for outputs that got none) and returns one gradient
    (or None) per input. State for the backward can be kept on `self`.

    >>> import eager as eg
    >>> class Square(Function):
    ...     def forward(self, x):
    ...         self.x = x
    ...         return x * x
    ...     def backward(self, dy):
    ...         return 2 * self.x * dy
    >>> Square()(eg.tensor(3.0)).item()
    9.0
    """

    def forward(self, *inputs: Any) -> Any:
        raise NotImplementedError

    def backward(self, *output_grads: Tensor) -> Any:
        raise NotImplementedError

    def __call__(self, *inputs: Any) -> Any:
        h = context.current()
        if h is not None:
            h.function_call(self)
        with no_grad():
            result = self.forward(*inputs)
        single = isinstance(result, Tensor)
        outs = tuple(_wrap(read(o)) for o in ((result,) if single else result))
        mask = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and hooks.needs_grad(x)]
        if mask:
            hooks.make_node(type(self).__name__,
                            [inputs[i] for i in mask], outs,
                            lambda cts: self._pullback(cts, mask, len(inputs)))
        return outs[0] if single else outs

    def _pullback(self, cts: Sequence, mask: Sequence[int], n_inputs: int) -> list:
        with no_grad():
            grads = self.backward(*(_wrap(c) for c in cts))
        grads = [grads] if isinstance(grads, Tensor) or grads is None else list(grads)
        if len(grads) != n_inputs:
            raise BackwardError(
                f"{type(self).__name__}.backward returned {len(grads)} gradients for "
                f"{n_inputs} inputs; return one per input (None where there is none)"
            )
        return [None if grads[i] is None else read(grads[i]) for i in mask]
