"""`partial_trace(trace_gmcallback=True)`: the attach callbacks of the GradManager running a
backward, compiled for the inputs of a segment.

MegEngine's `partial_trace` compiles GradManager callbacks (gradient scaling, clipping, the
all-reduce of data-parallel training) into the segment's backward, so they cost no Python per
step. Here the segment's tape node, for each attached input whose whole gradient comes from
that node in this backward, hands the gradients to one compiled step that applies every
callback in order. The step is captured as `xla_trace` captures one: a tensor a callback closes
over is read afresh at every call (never baked in as a stale constant), per-rank collectives
(`dist.make_allreduce_cb`) compile as collectives, and the callbacks' Python runs only when the
step is captured. The manager then skips those callbacks in Python. An input that also gets a
gradient elsewhere (a weight the eager head uses too) keeps its Python callbacks, which must
see its whole gradient.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import eager as eg

from ..errors import TraceError

hooks = eg.hooks
Chains = tuple  # per gradient: the tuple of callbacks to apply, in order


class CompiledCallbacks:
    """The finisher of a `partial_trace` function's segments (see `autograd_bridge`).

    Args:
        name: the function's name, for the compiled step's.
        compile_step: makes a compiled step (an `xla_trace` function) of a Python function.
    """

    def __init__(self, name: str, compile_step: Callable[[Callable], Callable]):
        self._name = name
        self._compile = compile_step
        # manager -> (its version, {callback chains: compiled step}). Weak: a manager that
        # dies takes its steps along; a new version (an attach) drops the old steps.
        self._steps: weakref.WeakKeyDictionary[Any, tuple[Any, dict[Chains, Callable]]] = \
            weakref.WeakKeyDictionary()

    def __call__(self, manager: Any, tensors: Sequence[Any], grads: Sequence[Any],
                 sole: Sequence[bool]) -> list:
        picked = []
        for k, (t, g, alone) in enumerate(zip(tensors, grads, sole)):
            if alone and g is not None:
                chain = manager.callbacks_of(t)
                if chain:
                    picked.append((k, tuple(chain)))
        out = list(grads)
        if not picked:
            return out
        step = self._step(manager, tuple(chain for _, chain in picked))
        with eg.no_grad():
            done = step([tensors[k] for k, _ in picked], [hooks.wrap(grads[k]) for k, _ in picked])
        for (k, _), g in zip(picked, done):
            out[k] = hooks.Finished(eg.read(g))
        return out

    def _step(self, manager: Any, chains: Chains) -> Callable:
        version = manager.version
        held = self._steps.get(manager)
        if held is None or held[0] != version:
            held = self._steps[manager] = (version, {})
        step = held[1].get(chains)
        if step is None:
            step = held[1][chains] = self._compile(_apply(chains, f"{self._name}_callbacks"))
        return step


def _apply(chains: Chains, name: str) -> Callable:
    """The Python of the compiled step: every chain of callbacks on its gradient."""

    def apply_callbacks(tensors: list, grads: list) -> list:
        out = []
        for t, g, chain in zip(tensors, grads, chains):
            for cb in chain:
                new = cb(t, g)
                if not isinstance(new, eg.Tensor) or new.shape != g.shape:
                    got = (f"shape {new.shape}" if isinstance(new, eg.Tensor)
                           else type(new).__name__)
                    raise TraceError(
                        f"the GradManager callback {getattr(cb, '__qualname__', cb)!r} returned "
                        f"{got} for a gradient of shape {g.shape}: a callback returns the "
                        "gradient to use, a Tensor of the same shape")
                g = new
            out.append(g)
        return out

    apply_callbacks.__name__ = apply_callbacks.__qualname__ = name
    return apply_callbacks
