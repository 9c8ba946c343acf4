"""Converting a model for quantization (MegEngine's `megengine.quantization.quantize`):
`quantize_qat` swaps its float modules for their quantization-aware forms (`eager.module.qat`)
and gives them observers and fake quantizers from a `QConfig`; `enable_observer`,
`disable_fake_quant`, ... switch those on and off for a whole model; `reset_qconfig` replaces
them; `apply_easy_quant` searches better scales; `quantize` converts the QAT modules to int8
modules.

>>> import eager as eg, eager.module as M
>>> net = M.Sequential(M.QuantStub(), M.ConvBnRelu2d(3, 4, 3), M.DequantStub())
>>> _ = quantize_qat(net)
>>> [type(m).__module__ for m in net]
['eager.module.qat.quant_dequant', 'eager.module.qat.conv_bn', 'eager.module.qat.quant_dequant']
>>> type(net[1].act_observer).__name__, type(net[1].weight_fake_quant).__name__
('ExponentialMovingAverageObserver', 'FakeQuantize')
"""

from __future__ import annotations

import functools as ft
from collections.abc import Callable
from copy import deepcopy
from typing import Any

import numpy as np

from .. import functional as F
from .. import module as Float
from ..core.errors import EagerError
from ..core.tensors import Tensor
from ..logger import get_logger
from ..module import Module
from ..module import qat as QAT
from ..module import quantized as Quantized
from ..module.hooks import HookHandler
from ..module.qat import QATModule
from ..module.qat.module import use_bias_quantizer
from .qconfig import QConfig, ema_fakequant_qconfig
from .utils import fake_quant_bias

__all__ = ["quantize_qat", "quantize", "reset_qconfig", "propagate_qconfig", "hook_qat_module",
           "apply_easy_quant", "enable_fake_quant", "disable_fake_quant", "enable_observer",
           "disable_observer", "QuantizeError", "QuantizedModuleError"]

use_bias_quantizer(fake_quant_bias)  # the QAT modules' seam (see eager/module/qat/module.py)

logger = get_logger(__name__)


class QuantizeError(EagerError, TypeError):
    """A module that `quantize_qat` would convert has no QAT form: a subclass of a quantable
    module, which the conversion does not guess at (give its QAT class in `mapping`)."""


class QuantizedModuleError(QuantizeError, NotImplementedError):
    """`quantize` has no int8 form for a QAT module (a subclass of one, or a QAT module of
    the user's): pass one in `mapping`, or keep the QAT model, which computes the same values
    in float."""


# the float modules MegEngine converts, by its names: those with a QAT form here
_QUANTABLE = [name for name in QAT.__all__ if name != "QATModule"]
_FLOAT_TO_QAT: dict[type, type] = {getattr(Float, n): getattr(QAT, n) for n in _QUANTABLE}
# the int8 forms of the QAT modules, by MegEngine's names
_QAT_TO_QUANTIZED: dict[type, type] = {getattr(QAT, n): getattr(Quantized, n) for n in _QUANTABLE}


def _replace(value: Any, old: Module, new: Module) -> tuple[Any, bool]:
    """`value` (an attribute) with `old` replaced by `new`, in lists, tuples and dicts too."""
    if value is old:
        return new, True
    if isinstance(value, (list, tuple)):
        pairs = [_replace(v, old, new) for v in value]
        if not any(found for _, found in pairs):
            return value, False
        items = [v for v, _ in pairs]
        return (tuple(items) if isinstance(value, tuple) else items), True
    if isinstance(value, dict):
        pairs_ = {k: _replace(v, old, new) for k, v in value.items()}
        if not any(found for _, found in pairs_.values()):
            return value, False
        return {k: v for k, (v, _) in pairs_.items()}, True
    return value, False


def _swap(owner: Module, old: Module, new: Module) -> None:
    """Put `new` where `owner` holds `old` (an attribute, or inside a list or dict of one)."""
    for name, value in list(owner.__dict__.items()):
        replaced, found = _replace(value, old, new)
        if found:
            setattr(owner, name, replaced)
            return
    raise AssertionError(f"{type(old).__name__} is not held by its {type(owner).__name__}")


def _below(module: Module, keep: Callable[[Module], bool]) -> list[tuple[str, Module, Module]]:
    """(name, sub-module, the module holding it) for the sub-modules `keep` accepts, in
    MegEngine's order, each once; `module` itself is not among them, as in MegEngine."""
    walk = module._walk("", True, {id(module): module})
    return [(name, leaf, owner) for name, leaf, owner in walk
            if isinstance(leaf, Module) and keep(leaf)]


def _convert(module: Module, table: dict[type, type], make: str, error: type[QuantizeError],
             skip: Callable[[Module, Module], bool]) -> None:
    """Replace every sub-module of a type in `table` by `table[type].<make>(it)`, except the
    ones `skip(sub-module, owner)` keeps."""
    kinds = tuple(table)
    for name, sub, owner in _below(module, lambda m: isinstance(m, kinds)):
        if skip(sub, owner):
            continue
        target = table.get(type(sub))
        if target is None:
            raise error(_no_target(name, sub, make))
        _swap(owner, sub, getattr(target, make)(sub))


def _no_target(name: str, sub: Module, make: str) -> str:
    kind = type(sub).__name__
    if make == "from_qat_module":
        return (f"quantize: no int8 module for the QAT {kind} at {name!r} (it is not one of "
                "eager.module.qat's, which eager.module.quantized converts). Pass its int8 "
                "class in mapping={%s: ...}, or keep the QAT model, which computes the values "
                "of the int8 one in float." % kind)
    return (f"quantize_qat: {kind} at {name!r} is a subclass of a module with a QAT form, "
            "but not that module: give its QAT class in mapping={%s: ...} (or call "
            "disable_quantize() on it to keep it in float)." % kind)


def quantize_qat(module: Module, inplace: bool = True, qconfig: QConfig = ema_fakequant_qconfig,
                 mapping: dict[type, type] | None = None) -> Module:
    """Replace `module`'s float sub-modules that have a QAT form (`eager.module.qat`) by it,
    sharing their parameters, then give every QAT sub-module `qconfig`'s observers and fake
    quantizers. A sub-module of a converted one (a ConvBn2d's conv) stays as it is, so do those
    marked by `disable_quantize()` and those already quantization-aware; `mapping` adds float
    class -> QAT class pairs. With `inplace=False` a deep copy is converted. Returns the model.
    """
    if not inplace:
        module = deepcopy(module)
    table = {**_FLOAT_TO_QAT, **(mapping or {})}
    kinds = tuple(table)

    def skip(sub: Module, owner: Module) -> bool:
        return (isinstance(owner, kinds) or isinstance(sub, QATModule)
                or getattr(sub, "quantize_disabled", False))

    _convert(module, table, "from_float_module", QuantizeError, skip)
    propagate_qconfig(module, qconfig)
    return module


def quantize(module: Module, inplace: bool = True,
             mapping: dict[type, type] | None = None) -> Module:
    """Replace `module`'s QAT sub-modules by their int8 forms (`from_qat_module`); `mapping`
    adds QAT class -> int8 class pairs. Raises `QuantizedModuleError` for a QAT module with no
    int8 form (a subclass, or one of the user's). With `inplace=False` a deep copy is
    converted. Returns the model, whose int8 modules only infer (call `.eval()`)."""
    if not inplace:
        module = deepcopy(module)
    table = {**_QAT_TO_QUANTIZED, **(mapping or {})}
    pending = _below(module, lambda m: isinstance(m, QATModule) and type(m) not in table)
    if pending:
        name, sub, _ = pending[0]
        raise QuantizedModuleError(_no_target(name, sub, "from_qat_module"))
    _convert(module, table, "from_qat_module", QuantizedModuleError, lambda m, o: False)
    return module


def _qat_modules(module: Module) -> list[QATModule]:
    return [m for _, m, _ in _below(module, lambda m: isinstance(m, QATModule))]  # type: ignore


def reset_qconfig(module: Module, qconfig: QConfig, inplace: bool = True) -> Module:
    """Replace the observers and fake quantizers of `module`'s QAT sub-modules by `qconfig`'s,
    each new one given the old one's qparams where it takes them (`set_qparams`), so a
    calibrated model keeps its scales (a `passive_qconfig` after calibration)."""
    if not inplace:
        module = deepcopy(module)

    def make(factory: Callable[[], Any] | None, qparams: Any) -> Any:
        made = factory() if factory is not None else None
        if made is not None and getattr(made, "set_qparams", None) is not None:
            made.set_qparams(qparams)
        return made

    for m in _qat_modules(module):
        if m.with_weight:
            params = m.get_weight_qparams()
            m.weight_observer = make(qconfig.weight_observer, params)
            m.weight_fake_quant = make(qconfig.weight_fake_quant, params)
        if m.with_act:
            params = m.get_activation_qparams()
            m.act_observer = make(qconfig.act_observer, params)
            m.act_fake_quant = make(qconfig.act_fake_quant, params)
    return module


def _propagate(module: Module, method: str, *args: Any) -> None:
    """Call `method(*args)` of every QAT module in `module`, itself included."""
    def call(m: Module) -> None:
        if isinstance(m, QATModule):
            getattr(m, method)(*args)

    module.apply(call)


def propagate_qconfig(module: Module, qconfig: QConfig) -> None:
    """Give every QAT module in `module` (itself included) `qconfig`'s observers and fake
    quantizers, new ones."""
    _propagate(module, "set_qconfig", qconfig)


def enable_fake_quant(module: Module) -> None:
    """Turn on fake quantization in every QAT module of `module`."""
    _propagate(module, "set_fake_quant", True)


def disable_fake_quant(module: Module) -> None:
    """Turn off fake quantization in every QAT module of `module`: they compute in float."""
    _propagate(module, "set_fake_quant", False)


def enable_observer(module: Module) -> None:
    """Turn on the observers of every QAT module of `module`: they update their statistics."""
    _propagate(module, "set_observer", True)


def disable_observer(module: Module) -> None:
    """Turn off the observers of every QAT module of `module`: their statistics stay."""
    _propagate(module, "set_observer", False)


def hook_qat_module(module: Module, func: Callable) -> list[HookHandler]:
    """Register `func` as a forward hook of every QAT sub-module; returns the handles."""
    return [m.register_forward_hook(func) for m in _qat_modules(module)]


def _cosine(x: Tensor, y: Tensor) -> float:
    """Mean over the batch of the cosine similarity of x's and y's samples."""
    axes = tuple(range(1, x.ndim))
    sim = (x * y).sum(axis=axes) / (F.norm(x, axis=axes) * F.norm(y, axis=axes))
    return float(sim.mean().item())


def _search_scale(mod: QATModule, inputs: tuple, output: Tensor, where: str, batch: int,
                  grid: Callable[[np.ndarray], np.ndarray]) -> Tensor | None:
    """EasyQuant's search for one module: the scale of its `where` observer that makes its
    fake-quantized output (on the batch's second copy) closest to the float output (on the
    first), by cosine similarity."""
    mod.__dict__["_forward_hooks"].clear()  # it is called again here: not through this hook
    normal_in = [x[:batch] for x in inputs]
    quant_in = [x[batch:] for x in inputs]
    disable_fake_quant(mod)
    normal_out = mod(*normal_in)
    enable_fake_quant(mod)
    observer = getattr(mod, where)
    if observer is None:
        return None
    best, best_scale = 0.0, None
    for scale in grid(observer.orig_scale):
        observer.scale = scale
        sim = _cosine(normal_out, mod(*quant_in))
        if sim > best:
            best, best_scale = sim, scale
    if best_scale is None:
        logger.warning("EasyQuant finds no better scale")
    else:
        observer.scale = best_scale
    return F.concat([normal_out, output[batch:]])


def apply_easy_quant(module: Module, data: Tensor, start: float = 0.8, stop: float = 1.2,
                     num: int = 40) -> Module:
    """EasyQuant (arXiv 2006.16669): for each QAT module, search `num` scales in
    [start, stop] x its calibrated scale, first of the weights, then of the activations, for
    the one whose fake-quantized output on `data` is closest to the float output (cosine
    similarity). The observers must be `PassiveObserver`s holding calibrated scales
    (`easyquant_qconfig` with `reset_qconfig` after calibration). Returns the model."""
    batch = data.shape[0]
    both = F.concat([data, data])

    def grid(orig: np.ndarray) -> np.ndarray:
        return np.linspace(start * orig, stop * orig, num)

    for where in ("weight_observer", "act_observer"):
        search = ft.partial(_search_scale, where=where, batch=batch, grid=grid)
        hook_qat_module(module, search)
        module(both)
    return module

