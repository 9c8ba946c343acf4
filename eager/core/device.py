"""Devices are jax devices, named like MegEngine's: "cpu0", "gpu0", "gpu1"."""

from __future__ import annotations

import weakref
from typing import Any, TypeAlias

import jax
from jax.sharding import NamedSharding

from .errors import DeviceError

_default: jax.Device | None = None

# What a `device=` argument may be: a name ("cpu0", "gpu1"), a jax device, a sharding, or None.
DeviceLike: TypeAlias = str | jax.Device | jax.sharding.Sharding | None


def _kind(platform: str) -> str:
    return "gpu" if platform in ("gpu", "cuda", "rocm") else platform


def name_of(device: jax.Device) -> str:
    """The name of a jax device: its platform and its index among that platform's devices."""
    kind = _kind(device.platform)
    index = [d for d in jax.devices(device.platform)].index(device)
    return f"{kind}{index}"


def parse(device: DeviceLike) -> Any:
    """A jax device from a name ("cpu0", "gpu1", "cuda0", "cpu"); a jax device or a sharding
    (a layout over several devices) is returned as it is."""
    if device is None or isinstance(device, (jax.Device, jax.sharding.Sharding)):
        return device
    name = str(device).lower().replace(":", "")
    kind = name.rstrip("0123456789")
    index = int(name[len(kind):] or 0)
    platform = {"cuda": "gpu", "gpu": "gpu", "cpu": "cpu", "tpu": "tpu"}.get(kind)
    try:
        return jax.devices(platform)[index]
    except (RuntimeError, IndexError, ValueError) as e:
        raise DeviceError(
            f"no device {device!r}; available: {[name_of(d) for d in jax.devices()]}"
        ) from e


def get_default_device() -> str:
    """The name of the device new tensors are placed on."""
    return name_of(_default or jax.devices()[0])


def set_default_device(device: str) -> None:
    """Place new tensors on `device` (e.g. "gpu0"); ops run where their inputs are."""
    global _default
    _default = parse(device)


def default() -> jax.Device | None:
    """The device set by `set_default_device`, or None for jax's default."""
    return _default


# Note [committed arrays]: jax keys the executables of a jitted function by whether each argument
# is committed to a device, and the results of a computation over committed arrays are committed.
# A step's outputs (parameters after `opt.step()`, a segment's results) are committed, so if new
# tensors were not, the second step would miss every cache entry the first one compiled and
# compile each eager op again. So in a process with one device every array a tensor is created
# from is committed to it. With several devices new arrays stay uncommitted, as jax makes them:
# an unreplicated module then still runs on a batch sharded over a mesh (jax moves uncommitted
# arguments to where the others lie, but refuses committed ones on different devices), and
# there the second step does not recompile anyway once parameters are replicated.
# The layout each tensor's gradient is given as a GradManager writes it (`dist.shard_params`
# with stage=2), by the tensor's id with a weak reference that is checked on every lookup and
# removes the entry when the tensor dies (a WeakKeyDictionary would compare two Tensors with
# `==`, which is elementwise).
_GRAD_LAYOUTS: dict[int, tuple[weakref.ref, NamedSharding]] = {}


def set_grad_layout(tensor: Any, sharding: NamedSharding | None) -> None:
    """Lay out `tensor`'s gradients by `sharding` from now on (None: as they come)."""
    key = id(tensor)
    if sharding is None:
        _GRAD_LAYOUTS.pop(key, None)
        return

    def died(ref: weakref.ref) -> None:
        if (entry := _GRAD_LAYOUTS.get(key)) is not None and entry[0] is ref:
            del _GRAD_LAYOUTS[key]

    _GRAD_LAYOUTS[key] = (weakref.ref(tensor, died), sharding)


def grad_layout(tensor: Any) -> NamedSharding | None:
    """The layout `set_grad_layout` gave `tensor`'s gradients, or None."""
    if not _GRAD_LAYOUTS:
        return None
    entry = _GRAD_LAYOUTS.get(id(tensor))
    return entry[1] if entry is not None and entry[0]() is tensor else None


_many_devices: bool | None = None  # whether this process sees several devices (set once)
_cpu_mesh: bool | None = None  # whether those are CPU devices (set once)


def waits_for_spread_results() -> bool:
    """Whether eager ops wait for results laid out over several devices: on several CPU
    devices of one process only (Note [CPU collectives in flight])."""
    global _cpu_mesh
    if _cpu_mesh is None:
        _cpu_mesh = jax.local_device_count() > 1 and jax.local_devices()[0].platform == "cpu"
    return _cpu_mesh


def settle(out: Any) -> None:
    """Wait for the arrays of an op's result `out` that lie on several devices.

    Note [CPU collectives in flight]: XLA:CPU runs each device's part of a program laid out
    over several devices of one process as a task of one shared thread pool, and a collective
    blocks its thread until every device's part arrives. With many such programs in flight
    (eager code dispatches one per op without waiting), the pool's threads can all be held by
    parts of different programs that wait for each other: measured on 2 cores with 4 virtual
    devices, the GPT workload's eager step aborted in its second step ("Expected 4 threads to
    join the rendezvous, but only 3 of them arrived", after 40 s), replicated or sharded alike,
    and ran when every eager op waited for its result (0.14 s a step). Compiled regions are one
    program per call and are not waited for; accelerators queue each device's work on its own
    stream and are not affected."""
    for o in out if isinstance(out, (tuple, list)) else (out,):
        if (isinstance(o, jax.Array) and not isinstance(o, jax.core.Tracer)
                and len(o.sharding.device_set) > 1):
            o.block_until_ready()


def keep_layout(old: Any, new: Any) -> Any:
    """`new`, moved to `old`'s layout when `old` is laid out over a mesh (a `NamedSharding`)
    and `new`, of the same shape, lies otherwise; else `new` as it is."""
    global _many_devices
    if _many_devices is None:  # with one device there is no other layout (and the check,
        _many_devices = jax.device_count() > 1  # on every optimizer update, costs ~1 us)
    if not _many_devices or new is old:
        return new
    want = getattr(old, "sharding", None)
    if type(want) is not NamedSharding:
        return new
    got = getattr(new, "sharding", None)
    if (got is None or got == want or new.shape != old.shape
            or got.is_equivalent_to(want, new.ndim)):
        return new
    return jax.device_put(new, want)


def commit(array: Any, like: Any = None) -> Any:
    """`array` committed where the array `like` lies when `like` is committed (a loaded value
    keeps the layout of the tensor it replaces), else, in a process with one device, on that
    device (Note [committed arrays]). Tracers and committed arrays are returned as they are."""
    if isinstance(array, jax.core.Tracer):
        return array
    if like is not None and getattr(like, "committed", False):
        return jax.device_put(array, like.sharding)
    if not isinstance(array, jax.Array):
        array = jax.numpy.asarray(array)
    if array.committed or jax.device_count() > 1:
        return array
    return jax.device_put(array, next(iter(array.devices())))
