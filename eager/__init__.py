"""eager: a MegEngine/PyTorch-style eager training framework on jax arrays.

>>> import eager as eg
>>> import eager.functional as F
>>> F.softmax(eg.tensor([[1.0, 1.0]]), axis=1).numpy().tolist()
[[0.5, 0.5]]

Every op is one pure jax function in the registry (`eager.OPS`); the eager call runs its cached
jitted version and the backward its cached jitted vjp. `eager.hooks` is the documented surface a
capture (the `partial` package) uses to observe eager execution.
"""

from . import (
    amp,
    autodiff,
    config,
    distributed,
    functional,
    hooks,
    hub,
    module,
    optimizer,
    profiling,
    random,
)
from . import tensor as _tensor_module  # noqa: F401  (`eager.tensor` the module; see its docstring)
from .autodiff import Function, GradManager, no_grad
from .core.conv_switch import conv_rewrites, set_conv_rewrites
from .core.creation import (
    arange,
    eye,
    from_dlpack,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from .core.errors import (
    AllocationError,
    AttachError,
    BackwardError,
    CheckpointError,
    DeviceError,
    DistributedError,
    EagerError,
    OpArgumentError,
    OpIndexError,
    OpTypeError,
    WorkerError,
)
from .core.ops import OPS, Op, defop
from .core.ragged import ragged_buckets, set_ragged_buckets
from .core.ragged_dispatch import ragged_fallbacks
from .core.tensors import Parameter, Tensor, apply, read, rebind
from .device import get_default_device, is_cuda_available, set_default_device
from .logger import get_logger, set_log_file, set_log_level
from .profiling import profile
from .serialization import load, save

__all__ = [
    "Tensor", "Parameter", "tensor", "zeros", "ones", "full", "full_like", "arange", "linspace",
    "eye", "zeros_like", "ones_like", "from_dlpack", "save", "load", "get_default_device",
    "set_default_device", "conv_rewrites", "set_conv_rewrites", "ragged_buckets",
    "set_ragged_buckets", "ragged_fallbacks", "distributed", "random",
    "functional", "module", "optimizer", "amp", "hub",
    "autodiff", "hooks", "GradManager", "Function", "no_grad", "apply", "read", "rebind", "OPS",
    "Op", "defop", "EagerError", "OpArgumentError", "OpTypeError", "OpIndexError",
    "AllocationError", "AttachError", "BackwardError", "CheckpointError", "DeviceError",
    "DistributedError", "WorkerError", "config", "is_cuda_available", "get_logger", "profile",
    "profiling", "set_log_file", "set_log_level",
]
