"""Devices are jax devices, named like MegEngine's: "cpu0", "gpu0", "gpu1"."""

from __future__ import annotations

from typing import Any

import jax

from .errors import DeviceError

_default: jax.Device | None = None


def _kind(platform: str) -> str:
    return "gpu" if platform in ("gpu", "cuda", "rocm") else platform


def name_of(device: jax.Device) -> str:
    """The name of a jax device: its platform and its index among that platform's devices."""
    kind = _kind(device.platform)
    index = [d for d in jax.devices(device.platform)].index(device)
    return f"{kind}{index}"


def parse(device: Any) -> Any:
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
