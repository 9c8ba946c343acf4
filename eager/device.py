"""MegEngine's `megengine.device`: which devices there are and which one new tensors go to.
Devices are jax devices, named like MegEngine's: "cpu0", "gpu0", "gpu1" (placement itself is
`eager.core.device`)."""

from __future__ import annotations

from typing import Any

import jax

from .core.device import get_default_device, set_default_device
from .core.errors import DeviceError

__all__ = ["get_default_device", "set_default_device", "get_device_count", "is_cuda_available",
           "set_prealloc_config", "what_is_xpu"]


def get_device_count(device_type: str) -> int:
    """How many devices of a kind ("cpu", "gpu", "cuda") this process sees (MegEngine's)."""
    platform = {"cuda": "gpu", "xpu": None}.get(device_type, device_type)
    try:
        return len(jax.devices(platform))
    except RuntimeError:  # jax has no backend of that kind here
        return 0


def is_cuda_available() -> bool:
    """Whether a CUDA GPU is there (MegEngine's `megengine.is_cuda_available`)."""
    return get_device_count("gpu") > 0


def set_prealloc_config(alignment: int = 1, min_req: int = 32 * 1024 * 1024,
                        max_overhead: int = 0, growth_factor: float = 2.0,
                        device_type: Any = None) -> None:
    """Accepted for MegEngine scripts, and checked as MegEngine checks it; it changes nothing:
    jax's allocator is set before the process starts (`XLA_PYTHON_CLIENT_PREALLOCATE`,
    `XLA_PYTHON_CLIENT_MEM_FRACTION`), not by a call."""
    if alignment <= 0 or min_req <= 0 or max_overhead < 0 or growth_factor < 1:
        raise DeviceError(
            f"set_prealloc_config: needs alignment > 0, min_req > 0, max_overhead >= 0 and "
            f"growth_factor >= 1, got {alignment}, {min_req}, {max_overhead}, {growth_factor}")


def what_is_xpu() -> str:
    """The kind of device "xpu" means here: "cuda" where a GPU is, else "cpu"."""
    return "cuda" if is_cuda_available() else "cpu"
