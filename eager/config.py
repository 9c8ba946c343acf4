"""Execution settings, as MegEngine's `megengine.config`, for scripts that set them.

MegEngine tunes its own kernels and queue with these; here XLA chooses kernels and jax runs
ops in order, so the values are kept and readable but change nothing. (XLA's deterministic GPU
kernels are asked for before jax starts: `XLA_FLAGS=--xla_gpu_deterministic_ops=true`.)

>>> import eager.config
>>> eager.config.async_level = 0
>>> eager.config.async_level
0
"""

from __future__ import annotations

async_level: int = 2
benchmark_kernel: bool = False
deterministic_kernel: bool = False
disable_memory_forwarding: bool = False
