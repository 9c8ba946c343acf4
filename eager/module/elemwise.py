"""MegEngine's `megengine.module.elemwise`: `Elemwise`, an elementwise function named by one of
MegEngine's elemwise modes ("ADD", "FUSE_ADD_RELU", "MUL", ...), as a module, so that
quantization can observe and fake-quantize its output (`eager.module.qat.Elemwise`).

Each mode is computed by this project's functions, with MegEngine's meaning: MOD is C's fmod
(the sign of the dividend), FLOOR_DIV floors, the FUSE_ modes apply their activation to a sum
(FUSE_MUL_ADD3 is a * b + c, FUSE_MUL_ADD4 a * b + c * d), SWITCH_GT0(x, y) is y where x > 0
and 0 elsewhere, COND_LEQ_MOV(x, y, z) z where x <= y and 0 elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import functional as F
from ..core.errors import OpArgumentError
from ..core.tensors import Tensor
from .module import Module


def _fmod(x: Any, y: Any) -> Tensor:
    # C's fmod, MegEngine's MOD: the remainder takes the dividend's sign (F.mod is Python's %)
    return F.sign(x) * F.mod(F.abs(x), F.abs(y))


def _where(cond: Tensor, value: Any) -> Tensor:
    return F.where(cond, value, 0)


_UNARY: dict[str, Callable[[Any], Tensor]] = {
    "ABS": F.abs, "ACOS": F.acos, "ACOSH": F.acosh, "ASIN": F.asin, "ASINH": F.asinh,
    "ATANH": F.atanh, "CEIL": F.ceil, "COS": F.cos, "COSH": F.cosh, "ERF": F.erf,
    "ERFC": lambda x: 1 - F.erf(x), "ERFINV": F.erfinv, "ERFCINV": lambda x: F.erfinv(1 - x),
    "EXP": F.exp, "EXPM1": F.expm1, "FAST_TANH": F.tanh, "FLOOR": F.floor, "GELU": F.gelu,
    "HSIGMOID": F.hsigmoid, "H_SWISH": F.hswish, "ISINF": F.isinf, "ISNAN": F.isnan,
    "LOG": F.log, "LOG1P": F.log1p, "LOGSIGMOID": F.logsigmoid, "NEGATE": F.neg,
    "NOT": F.logical_not, "RELU": F.relu, "RELU6": F.relu6, "ROUND": F.round,
    "SIGMOID": F.sigmoid, "SIGN": F.sign, "SILU": F.silu, "SIN": F.sin, "SINH": F.sinh,
    "SOFTPLUS": F.softplus, "SQRT": F.sqrt, "SQUARE": F.square, "TAN": F.tan, "TANH": F.tanh,
}
_BINARY: dict[str, Callable[[Any, Any], Tensor]] = {
    "ADD": F.add, "SUB": F.sub, "MUL": F.mul, "TRUE_DIV": F.div, "FLOOR_DIV": F.floor_div,
    "MOD": _fmod, "POW": F.pow, "MAX": F.maximum, "MIN": F.minimum, "ATAN2": F.atan2,
    "EQ": F.equal, "NEQ": F.not_equal, "LT": F.less, "LEQ": F.less_equal,
    "AND": F.logical_and, "OR": F.logical_or, "XOR": F.logical_xor,
    "LOG_SUM_EXP": F.logaddexp, "PRELU": F.prelu,
    "FUSE_ADD_RELU": lambda x, y: F.relu(x + y),
    "FUSE_ADD_SIGMOID": lambda x, y: F.sigmoid(x + y),
    "FUSE_ADD_TANH": lambda x, y: F.tanh(x + y),
    "FUSE_ADD_H_SWISH": lambda x, y: F.hswish(x + y),
    "SWITCH_GT0": lambda x, y: _where(x > 0, y),
}
_TERNARY: dict[str, Callable[[Any, Any, Any], Tensor]] = {
    "FUSE_MUL_ADD3": lambda a, b, c: a * b + c,
    "CLIP": F.clip,
    "COND_LEQ_MOV": lambda x, y, z: _where(x <= y, z),
    "COND_LT_MOV": lambda x, y, z: _where(x < y, z),
}
_MODES: dict[str, tuple[int, Callable[..., Tensor]]] = {
    **{m: (1, f) for m, f in _UNARY.items()},
    **{m: (2, f) for m, f in _BINARY.items()},
    **{m: (3, f) for m, f in _TERNARY.items()},
    "FUSE_MUL_ADD4": (4, lambda a, b, c, d: a * b + c * d),
}


class Elemwise(Module):
    """The elementwise function of MegEngine's mode `method` (a name such as "ADD" or
    "FUSE_ADD_RELU", in any case), applied to the inputs `forward` is given.

    >>> import eager as eg, eager.module as M
    >>> M.Elemwise("FUSE_ADD_RELU")(eg.tensor([-3.0, 1.0]), eg.tensor([1.0, 1.0])).tolist()
    [0.0, 2.0]
    """

    def __init__(self, method: str):
        super().__init__()
        mode = str(method).upper()
        if mode not in _MODES:
            raise OpArgumentError(
                f"Elemwise: unknown mode {method!r}; the modes are {sorted(_MODES)} (MegEngine's "
                "gradient and integer bit-shift modes are not served)")
        self.method = method

    def forward(self, *inps: Any) -> Tensor:
        mode = str(self.method).upper()
        arity, f = _MODES[mode]
        if len(inps) != arity:
            raise OpArgumentError(f"Elemwise({self.method!r}) takes {arity} input"
                                  f"{'s' if arity > 1 else ''}, got {len(inps)}")
        return f(*inps)

    def _extra_repr(self) -> str:
        return repr(self.method)
