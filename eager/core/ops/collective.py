"""`Collective`: an op over the ranks of the process group, defined once as a pure jax function
of one rank's block that reduces over the mesh axis `AXIS` (`lax.psum(x, AXIS)`).

Eagerly, a call lifts each rank's local arrays into global arrays with one block per rank (no
copy: each process contributes the buffer it holds), runs the function under `shard_map` on
the group's mesh, jitted and cached, and takes back this rank's block. Inside a `partial_trace` /
`xla_trace` region the function is traced as it is: the capture binds the axis, and the region
is compiled under `shard_map` over the ranks' mesh (`xla_segments.PerRank`). Its gradient is the
same lift of `jax.vjp` of the same function, as for every op. Collectives go over jax's own
transport (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

import functools as ft
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from ..errors import DistributedError
from ..process_group import AXIS, Group, group
from .registry import Op, defop, make_vjp


class Collective(Op):
    """An `Op` whose forward and backward run across the ranks of the process group."""

    __slots__ = ()
    per_rank = True

    def jitted(self, key: tuple) -> Callable:
        fn = self._fwd.get(key)
        if fn is None:
            fn = self._fwd[key] = _PerRank(self.name, ft.partial(self._impl, **dict(key)))
        return fn

    def vjp(self, key: tuple, mask: tuple[int, ...]) -> Callable:
        fn = self._bwd.get((key, mask))
        if fn is None:
            fn = self._bwd[(key, mask)] = _PerRank(self.name, make_vjp(self, dict(key), mask))
        return fn


class _PerRank:
    """`f` (over one rank's arrays, reducing over `AXIS`) called on this rank's local arrays."""

    __slots__ = ("name", "f", "_cache")

    def __init__(self, name: str, f: Callable):
        self.name, self.f = name, f
        self._cache: dict[tuple, Any] = {}  # (group, argument structure) -> jitted function

    def __call__(self, *args: Any) -> Any:
        leaves, tree = jax.tree.flatten(args)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self._traced(args)
        g = group()
        run = self._cache.get((g, tree))
        if run is None:
            run = self._cache[(g, tree)] = self._compile(g, tree)
        out = run(*[_lift(x, g) for x in leaves])
        return jax.tree.map(_unlift, out)

    def _cache_size(self) -> int:
        """Compiled variants, as a jitted function reports them (one jit per group and
        argument structure)."""
        return sum(run._cache_size() for run in self._cache.values())

    def _traced(self, args: tuple) -> Any:
        """Inside a region: the collective itself, over the rank axis that the capture binds
        (the region is then compiled under `shard_map` over the ranks' mesh)."""
        try:
            return self.f(*args)
        except NameError as e:  # jax: "unbound axis name"
            raise DistributedError(
                f"{self.name} was traced where the ranks' axis {AXIS!r} is not bound: in a "
                f"region with graph breaks (an exclude_from_trace() block, graph_breaks=True), "
                f"or under a jax transformation of your own. Compiled per-rank collectives need "
                f"a region without breaks: move the break or the collective out of the region, "
                f"or train in the global-array style (dist.shard_batch / dist.replicate), where "
                f"XLA inserts the all-reduce ({e})") from None

    def _compile(self, g: Group, tree: Any) -> Callable:
        def body(*blocks: Any) -> Any:
            out = self.f(*jax.tree.unflatten(tree, [b[0] for b in blocks]))
            return jax.tree.map(lambda r: r[None], out)

        spec = PartitionSpec(AXIS)
        return jax.jit(jax.shard_map(body, mesh=g.mesh, in_specs=spec, out_specs=spec,
                                     check_vma=False))


def _lift(x: Any, g: Group) -> jax.Array:
    """This rank's array as its block of a global array with a leading axis of `world_size`."""
    block = jax.device_put(x[None], g.mesh.devices[g.rank])
    sharding = NamedSharding(g.mesh, PartitionSpec(AXIS))
    return jax.make_array_from_single_device_arrays((g.world_size, *x.shape), sharding, [block])


def _unlift(out: jax.Array) -> jax.Array:
    """This rank's block of a global result, without the leading rank axis."""
    return out.addressable_data(0)[0]


# ----- the collectives (`eager.distributed.functional` calls them on Tensors) -----------------
@defop("dist.all_reduce_sum", cls=Collective)
def all_reduce_sum(x):
    return lax.psum(x, AXIS)


# pmax / pmin have no derivative in jax; over the gathered values, max and min do (the gradient
# goes to the ranks that hold the extreme value).
@defop("dist.all_reduce_max", cls=Collective)
def all_reduce_max(x):
    return jnp.max(lax.all_gather(x, AXIS), axis=0)


@defop("dist.all_reduce_min", cls=Collective)
def all_reduce_min(x):
    return jnp.min(lax.all_gather(x, AXIS), axis=0)


@defop("dist.all_gather", cls=Collective)
def all_gather(x):
    return lax.all_gather(x, AXIS, tiled=x.ndim > 0)


@defop("dist.broadcast", cls=Collective)
def broadcast(x, *, src):
    return lax.psum(jnp.where(lax.axis_index(AXIS) == src, x, jnp.zeros_like(x)), AXIS)


@defop("dist.reduce_scatter_sum", cls=Collective)
def reduce_scatter_sum(x):
    return lax.psum_scatter(x, AXIS, scatter_dimension=0, tiled=True)
