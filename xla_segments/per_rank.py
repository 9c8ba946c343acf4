"""Per-rank segments: a function written for one rank's arrays that communicates over a mesh
axis (`lax.psum(x, axis)`), compiled as one SPMD program over a mesh of one device per rank.

This is how MegEngine's per-rank style (each process holds its own local tensors and calls
collectives) compiles: the segment runs under `jax.shard_map` over the ranks' mesh, where the
axis is bound, and its executables take and return each rank's local arrays. A local array of
shape `(n, ...)` is rank r's block of a global array of shape `(world * n, ...)` split on axis 0,
made from the buffer the rank holds, without a copy; a scalar is a block of shape `(1,)`.
Residuals (forward to backward) stay global arrays, which the caller passes back untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec


@dataclass(frozen=True)
class PerRank:
    """The mesh of one device per rank (in rank order) and the axis collectives reduce over.
    Each process must hold exactly one device of `mesh` (its own)."""

    mesh: Mesh
    axis: str

    @property
    def world(self) -> int:
        return self.mesh.devices.size

    @property
    def sharding(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec(self.axis))

    def global_aval(self, aval: Any) -> jax.ShapeDtypeStruct:
        """The global array whose rank blocks have `aval`'s shape."""
        shape = tuple(aval.shape)
        lead = shape[0] if shape else 1
        return jax.ShapeDtypeStruct((self.world * lead, *shape[1:]), aval.dtype,
                                    weak_type=getattr(aval, "weak_type", False),
                                    sharding=self.sharding)

    def spmd(self, fn: Callable[..., Sequence[Any]], in_avals: Sequence[Any],
             scalar_out: list[bool]) -> Callable:
        """`fn` over local arrays as a function over the global arrays, run by every rank.
        Tracing it fills `scalar_out` (which outputs are scalars, to give them back as such)."""
        scalar_in = [len(a.shape) == 0 for a in in_avals]
        spec = PartitionSpec(self.axis)

        def body(*blocks: Any) -> tuple:
            args = [b.reshape(()) if s else b for b, s in zip(blocks, scalar_in)]
            outs = tuple(fn(*args))
            scalar_out[:] = [o.ndim == 0 for o in outs]
            return tuple(o.reshape((1,)) if o.ndim == 0 else o for o in outs)

        return jax.shard_map(body, mesh=self.mesh, in_specs=spec, out_specs=spec,
                             check_vma=False)

    def lift(self, x: Any) -> jax.Array:
        """This rank's local array as its block of a global array (no copy)."""
        if x.ndim == 0:
            x = x.reshape((1,))
        device = self._device()
        if getattr(x, "committed", False) is False or x.devices() != {device}:
            x = jax.device_put(x, device)
        return jax.make_array_from_single_device_arrays(
            (self.world * x.shape[0], *x.shape[1:]), self.sharding, [x])

    def _device(self) -> Any:
        mine = [d for d in self.mesh.devices.flat if d.process_index == jax.process_index()]
        if len(mine) != 1:
            raise ValueError(f"a per-rank mesh must hold exactly one device of each process; "
                             f"process {jax.process_index()} has {len(mine)}")
        return mine[0]

    def unlift(self, x: jax.Array, scalar: bool) -> jax.Array:
        """This rank's block of a global result, as the local array (a scalar again)."""
        block = x.addressable_data(0)
        return block.reshape(()) if scalar else block


class PerRankCall:
    """A compiled executable over global arrays, called with and returning local ones.

    `lifted(args)` says which arguments to lift (the others, residuals, pass as they are);
    `results(out)` turns the global results back into local ones. Attributes of the compiled
    executable (cost and memory analysis, output shardings, text) are its own."""

    __slots__ = ("compiled", "per_rank", "lift_args", "results")

    def __init__(self, compiled: Any, per_rank: PerRank, lift_args: Callable,
                 results: Callable):
        self.compiled, self.per_rank = compiled, per_rank
        self.lift_args, self.results = lift_args, results

    def __call__(self, *args: Any) -> Any:
        return self.results(self.compiled(*self.lift_args(args)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled, name)


def wrap(kind: str, compiled: Any, pr: PerRank, scalar_in: list[bool], scalar_out: list[bool],
         wrt: tuple = (), diff_outputs: tuple = ()) -> PerRankCall:
    """The local-array call of one of a segment's executables (`kind` as in `CompileOptions`)."""
    lift, unlift = pr.lift, pr.unlift

    def outputs(outs: Sequence[Any]) -> tuple:
        return tuple(unlift(o, s) for o, s in zip(outs, scalar_out))

    if kind == "forward":
        return PerRankCall(compiled, pr, lambda args: [lift(a) for a in args], outputs)
    if kind == "forward_vjp":
        return PerRankCall(compiled, pr, lambda args: [lift(a) for a in args],
                           lambda out: (outputs(out[0]), out[1]))

    def cotangents(args: tuple) -> tuple:
        residuals, cts = args
        return residuals, tuple(lift(c) for c in cts)

    def gradients(grads: Sequence[Any]) -> tuple:
        return tuple(unlift(g, scalar_in[i]) for g, i in zip(grads, wrt))

    return PerRankCall(compiled, pr, cotangents, gradients)


__all__ = ["PerRank", "PerRankCall", "wrap"]
