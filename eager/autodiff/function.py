"""Custom grad nodes (`Function`) and `no_grad`: the tape controls user code reaches for
besides `GradManager`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from .. import hooks
from ..core import context, tape
from ..core.errors import BackwardError
from ..core.tensors import Tensor, _wrap, _wrap_from, peek


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Ops inside the block are not recorded, even while a GradManager records."""
    tape.change(paused=1)
    try:
        yield
    finally:
        tape.change(paused=-1)


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
        outs = tuple(_wrap_from(o) for o in ((result,) if single else result))
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
        return [None if grads[i] is None else peek(grads[i]) for i in mask]


__all__ = ["Function", "no_grad"]
