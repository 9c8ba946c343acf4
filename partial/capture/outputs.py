"""What a captured region returned and changed, as program results, output leaves and effects
(typed objects, `region/sources.py`): the end of a capture (`Capture.finish`)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg
import eager.module as M

from ..errors import UnsupportedOutputError
from ..messages import ragged_output_error
from ..region import (
    STATIC_TYPES,
    Argument,
    Constant,
    GradOf,
    GradSlot,
    Held,
    Rebind,
    Result,
    SetAttr,
    SetGrad,
)
from .state import CaptureState

hooks = eg.hooks
_data = hooks.data
_Tensor, _Module = eg.Tensor, M.Module


class Outputs(CaptureState):
    """The part of `Capture` that classifies, once the region returned, its outputs and the
    effects to write back at every call."""

    def finish(self, out: Any) -> list:
        """Classify the region's outputs and effects; return the arrays it must output."""
        self.results: list = []
        self.result_tensors: list = []
        self._result_of: dict[int, int] = {}
        self._length_of: dict[int, int] = {}  # a ragged result's index -> its length's
        self._outputs(out)
        self.writes: list = []
        self._effects()
        escaped = self._escaped()
        if escaped:  # look again once reference cycles are gone
            gc.collect()
            escaped = self._escaped()
        for t in escaped:
            self.writes.append(Rebind(Held(t), Result(self._result(t))))
        # The region's own result Tensors may be held elsewhere too (`box["h"] = h; return h`):
        # the first call gives them their values and returns them, as eager code would.
        self.settle = [(weakref.ref(t), r) for r, t in enumerate(self.result_tensors)
                       if self.is_created(t)]
        return list(self.results)

    def _result(self, t: Any, returned: bool = False) -> int:
        """The index of the program output carrying `t`'s final value (added on first use).
        A ragged tensor (a data-dependent selection) may be `returned`: its padded storage and
        its length are two outputs (decision 15); it cannot be kept in state."""
        n = hooks.ragged_length(t)
        if n is not None and not returned:
            raise ragged_output_error(self.kind)
        r = self._result_of.get(id(t))
        if r is None:
            r = self._result_of[id(t)] = len(self.results)
            self.results.append(_data(t))
            self.result_tensors.append(t)
            if n is not None:
                self._length_of[r] = self._add_length(n)
        return r

    def _add_length(self, n: Any) -> int:
        """A ragged result's length as a program output of its own (int32, no gradient)."""
        length = hooks.wrap(jnp.asarray(n, jnp.int32))
        r = self._result_of[id(length)] = len(self.results)
        self.results.append(_data(length))
        self.result_tensors.append(length)
        return r

    def _describe(self, t: Any) -> Any:
        """Where a call finds the Tensor `t` stands for: a program output, an argument, a
        tensor by reference, or the current `.grad` of its owner."""
        if self.is_created(t):
            r = self._result(t, returned=True)
            return Result(r, self._length_of.get(r), hooks.quantized_dtype(t))
        if id(t) in self.arg_index:
            return Argument(self.arg_index[id(t)])
        source = self.source_of.get(id(t))
        if isinstance(source, GradSlot):
            return GradOf(source.owner)
        return Held(t)

    def _outputs(self, out: Any) -> None:
        leaves, self.out_treedef = jax.tree.flatten(out)
        self.out_leaves = []
        for leaf in leaves:
            if isinstance(leaf, _Tensor):
                self.out_leaves.append(self._describe(leaf))
            elif isinstance(leaf, (_Module, eg.optimizer.Optimizer)):
                self.out_leaves.append(Held(leaf))  # e.g. `return opt.step()`
            elif isinstance(leaf, (*STATIC_TYPES, np.generic)):
                self.out_leaves.append(Constant(leaf))
            else:
                raise UnsupportedOutputError(
                    f"the {self.kind} function returned a {type(leaf).__name__}; it may return "
                    "Tensors, Modules, Optimizers, plain Python values and tuples, lists and "
                    "dicts of them. Return the tensors you need and keep other objects outside "
                    "the region.")

    def _effects(self) -> None:
        """Writes for rebound tensors, `.grad` slots and tensor-valued module attributes."""
        for t in self.mutated.values():
            source = self.source_of.get(id(t))
            if id(t) in self.arg_index:
                dest: Any = Argument(self.arg_index[id(t)])
            elif isinstance(source, GradSlot):
                dest = GradOf(source.owner)
            else:
                dest = Held(t)
            self.writes.append(Rebind(dest, Result(self._result(t))))
        for owner in self.grads_written.values():
            g = hooks.raw_grad(owner)
            self.writes.append(SetGrad(owner, Constant(None) if g is None else self._describe(g)))
        for module, name in self.attr_outputs.values():
            v = module.__dict__.get(name)
            self.writes.append(SetAttr(module, name, self._describe(v) if isinstance(v, _Tensor)
                                       else Constant(v)))

    def _escaped(self) -> list:
        """Tensors created in the region, still alive, holding a traced value, not returned."""
        alive = [r() for r in list(self.made.values())]
        return [t for t in alive if t is not None and id(t) not in self._result_of
                and isinstance(_data(t), jax.core.Tracer)]
