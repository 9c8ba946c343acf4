"""Sharded training in the global-array style (ZeRO / FSDP): parameters and optimizer state laid
out split over a mesh axis, so each device holds 1/n of them.

Nothing here moves data during training: `shard_params` only places arrays. Eager ops,
`partial_trace` segments and `xla_trace` steps take their layout from their arguments, and XLA's
SPMD partitioner inserts the all-gathers and reduce-scatters a sharded step needs. A tensor keeps
the layout it was given (`eager.rebind` moves an update back to it), so a replicated parameter
stays replicated beside sharded optimizer state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..core.device import set_grad_layout
from ..core.errors import DistributedError
from ..core.tensors import Tensor, peek, rebind
from ..module.module import Module
from ..optimizer.optimizer import Optimizer
from .arrays import _mesh

_T = TypeVar("_T")
Specs = Mapping[str, PartitionSpec] | Callable[[str, Tensor], PartitionSpec | None]

STAGES = {1: "optimizer state", 2: "optimizer state and gradients",
          3: "parameters, gradients and optimizer state"}


def shard_params(obj: _T, mesh: Mesh | None = None, *, stage: int = 3, axis: str | None = None,
                 min_size: int = 1024, specs: Specs | None = None) -> _T:
    """Lay out a Module's parameters and an Optimizer's state split over the devices of `mesh`
    (in place: the tensors keep their identity); returns `obj`.

    `obj` is a Module, an Optimizer or a list of them; pass the model and its optimizer together
    (`shard_params([net, opt])`) so the state of a parameter is laid out as the parameter is.
    `stage` picks what is split, in ZeRO's numbering: 3 (FSDP) the parameters and the optimizer
    state (gradients come laid out as their parameters), 2 the optimizer state and the
    gradients (a GradManager writes each gradient split as its state), 1 the optimizer state
    only; parameters below 3 stay replicated. Buffers (BatchNorm
    statistics) and tensors of fewer than `min_size` elements stay replicated: splitting them
    saves little and costs a collective each. A tensor is split along its largest dimension
    that the mesh axis `axis` (default: the mesh's first) divides; one with none stays
    replicated. `specs` names a layout per parameter: a dict from dotted parameter names (as in
    `named_parameters()`) to `PartitionSpec`s, or a function `(name, tensor) -> PartitionSpec`
    (None: the rule above).

    >>> import eager.module as M
    >>> net = shard_params(M.Linear(4, 2048))
    >>> net.weight.sharding.spec == PartitionSpec("data")  # (2048, 4): split along the 2048
    True
    """
    if stage not in STAGES:
        raise DistributedError(
            f"shard_params: stage must be 1 ({STAGES[1]}), 2 ({STAGES[2]}) or 3 ({STAGES[3]}), "
            f"got {stage!r}")
    m = _mesh(mesh)
    name = m.axis_names[0] if axis is None else axis
    if name not in m.axis_names:
        raise DistributedError(f"shard_params: mesh axes are {m.axis_names}, not {name!r}")
    layout, grads = _layouts(*_split(obj), _Rule(m, name, min_size, specs), stage)
    for t, sharding in layout.items():
        rebind(t, _placed(peek(t), sharding), relayout=True)
    for p, grad_sharding in grads.items():
        set_grad_layout(p, grad_sharding)
    return obj


def _layouts(modules: list[Module], optimizers: list[Optimizer], rule: _Rule, stage: int
             ) -> tuple[dict[Tensor, NamedSharding], dict[Tensor, NamedSharding | None]]:
    """The layout of every tensor to place, and of every parameter's gradients (None: as they
    come), for ZeRO stage `stage`."""
    names: dict[Tensor, str] = {p: n for net in modules for n, p in net.named_parameters()}
    layout: dict[Tensor, NamedSharding] = {}
    grads: dict[Tensor, NamedSharding | None] = {}
    for p, n in names.items():
        layout[p] = rule.split(n, p) if stage == 3 else rule.replicated
    for opt in optimizers:
        for p, slots in opt.state.items():
            split = rule.split(names.get(p, ""), p)
            if p not in layout:
                layout[p] = split if stage == 3 else rule.replicated
            grads[p] = split if stage == 2 else None
            for t in slots.values():
                layout[t] = split if t.shape == p.shape else rule.replicated
    for net in modules:
        layout |= {b: rule.replicated for b in net.buffers() if b is not None}
    return layout, grads


def _placed(arr: jax.Array, sharding: NamedSharding) -> jax.Array:
    """`arr` (the same whole value in every process) laid out by `sharding`: in a run of
    several processes each builds the parts its own devices hold from its copy, and an array
    already spread over processes is moved by XLA."""
    if jax.process_count() == 1 or not arr.is_fully_addressable:
        return jax.device_put(arr, sharding)
    whole = np.asarray(arr)
    return jax.make_array_from_callback(whole.shape, sharding, lambda index: whole[index])


class _Rule:
    """Which layout a tensor gets: the user's spec, else split along its largest dimension
    that the mesh axis divides when it has at least `min_size` elements, else replicated."""

    def __init__(self, mesh: Mesh, axis: str, min_size: int, specs: Specs | None):
        self.mesh, self.axis, self.min_size, self.specs = mesh, axis, min_size, specs
        self.parts = mesh.shape[axis]
        self.replicated = NamedSharding(mesh, PartitionSpec())

    def split(self, name: str, t: Tensor) -> NamedSharding:
        spec = self._given(name, t)
        if spec is not None:
            return self._checked(name, t, spec)
        if t.size < self.min_size:
            return self.replicated
        dims = [d for d in range(t.ndim) if t.shape[d] % self.parts == 0]
        if not dims:
            return self.replicated
        d = max(dims, key=lambda d: t.shape[d])
        return NamedSharding(self.mesh, PartitionSpec(*([None] * d), self.axis))

    def _given(self, name: str, t: Tensor) -> PartitionSpec | None:
        if self.specs is None:
            return None
        if callable(self.specs):
            return self.specs(name, t)
        return self.specs.get(name)

    def _checked(self, name: str, t: Tensor, spec: PartitionSpec) -> NamedSharding:
        sharding = NamedSharding(self.mesh, spec)
        try:
            if len(spec) > t.ndim:
                raise ValueError(f"the layout names {len(spec)} dimensions")
            sharding.shard_shape(t.shape)
        except ValueError as e:
            raise DistributedError(
                f"shard_params: the layout {spec} given for parameter {name!r} of shape "
                f"{t.shape} does not fit the mesh {dict(self.mesh.shape)}: {e}; each split "
                f"dimension must be divisible by the size of its mesh axes") from None
        return sharding


def _split(obj: Any) -> tuple[list[Module], list[Optimizer]]:
    items: Iterable[Any] = obj if isinstance(obj, (list, tuple)) else [obj]
    modules, optimizers = [], []
    for item in items:
        if isinstance(item, Module):
            modules.append(item)
        elif isinstance(item, Optimizer):
            optimizers.append(item)
        else:
            raise TypeError(f"shard_params places a Module, an Optimizer or a list of them, "
                            f"got {type(item).__name__}")
    return modules, optimizers
