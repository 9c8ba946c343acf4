"""Normalizations of MegEngine's `F.nn` (nn.py imports them): batch, layer, group, instance and
local response normalization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.context import atomic as _atomic
from ..core.op_errors import bad_argument, number, require
from ..core.ops import OPS
from ..core.tensors import Tensor, apply, rebind
from ._args import _float_input, _ints, _t


def batch_norm(x: Any, running_mean: Tensor | None = None, running_var: Tensor | None = None,
               weight: Any = None, bias: Any = None, *, training: bool = False,
               momentum: float = 0.9, eps: float = 1e-5, inplace: bool = True) -> Any:
    """Batch normalization over axis 1 (channels).

    In training it normalizes with the batch statistics and updates the running statistics as
    `running = momentum * running + (1 - momentum) * batch` (MegEngine's momentum; the unbiased
    batch variance goes into `running_var`): in place, or with `inplace=False` it leaves them
    alone and returns `(y, new_running_mean, new_running_var)`, as MegEngine does. Otherwise it
    uses the running statistics. The output has x's dtype (float16 x with float32 parameters
    is normalized in float32).
    """
    if not training:
        require("batch_norm_eval", x, running_mean, running_var, weight, bias)
        return apply(OPS["batch_norm_eval"], x, running_mean, running_var, weight, bias,
                     eps=number(eps, "eps"))
    y, mean, var = apply(OPS["batch_norm_train"], x, weight, bias, eps=number(eps, "eps"))
    if running_mean is None or running_var is None:
        return y
    new_mean, new_var = apply(OPS["running_stats_update"], running_mean, running_var,
                              mean, var, momentum=number(momentum, "momentum"))
    if not inplace:
        return y, new_mean, new_var
    with _atomic():  # both statistics, or (a signal before) neither
        rebind(running_mean, new_mean)
        rebind(running_var, new_var)
    return y


def layer_norm(x: Any, normalized_shape: int | Sequence[int], affine: bool = True,
               weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` axes (biased variance)."""
    n = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    if not affine:
        weight = bias = None
    return apply(OPS["layer_norm"], x, weight, bias, n_axes=n, eps=number(eps, "eps"))


def group_norm(x: Any, num_groups: int, affine: bool = True, weight: Any = None,
               bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalize over channel groups of an (N, C, ...) tensor."""
    if not affine:
        weight = bias = None
    require("group_norm", x, weight, bias, groups=num_groups)
    return apply(OPS["group_norm"], x, weight, bias, groups=int(num_groups),
                 eps=number(eps, "eps"))


def instance_norm(x: Any, affine: bool, weight: Any = None, bias: Any = None,
                  eps: float = 1e-5) -> Tensor:
    """Normalize each (sample, channel) plane of NCHW `x` over its H * W values (biased
    variance), then, with `affine`, scale by `weight` and shift by `bias` (C values each)."""
    x = _t(x)
    # MegEngine's rules for this function, narrower than its op's: a group normalization takes
    # any (N, C, ...) tensor, of any dtype
    if x.ndim != 4:
        raise bad_argument(f"instance_norm: needs an NCHW (4-d) input, as MegEngine does; got "
                           f"shape {x.shape}.")
    _float_input("instance_norm", x)
    if not affine:
        weight = bias = None
    elif weight is None or bias is None:  # the option asks for both
        raise bad_argument("instance_norm: affine=True needs both weight and bias; pass them, "
                           "or affine=False.")
    # one channel per group: group normalization's statistics are instance normalization's
    c = x.shape[1]
    require("group_norm", x, weight, bias, groups=c)
    return apply(OPS["group_norm"], x, weight, bias, groups=c, eps=number(eps, "eps"))


def local_response_norm(x: Any, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4,
                        beta: float = 0.75) -> Tensor:
    """x / (k + alpha * s) ** beta, s the sum of x ** 2 over the `kernel_size` channels (axis 1)
    centred on each channel, zeros past the ends. `kernel_size` must be odd; unlike PyTorch,
    alpha is not divided by it (MegEngine's definition)."""
    x = _t(x)
    size = _ints("local_response_norm", "kernel_size", kernel_size, 1)[0]
    require("local_response_norm", x, size=size)
    return apply(OPS["local_response_norm"], x, size=size, k=number(k, "k"),
                 alpha=number(alpha, "alpha"), beta=number(beta, "beta"))
