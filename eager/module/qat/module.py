"""`QATModule`, the base of MegEngine's quantization-aware modules (`megengine.module.qat`).

A QAT module computes what its float module does, with its weight and its output passed
through an observer (which records statistics and gives scale and zero point) and a fake
quantizer (which rounds to the quantized grid and back, with a straight-through gradient), both
made from a `QConfig` by `set_qconfig`. Observers and fake quantizers are sub-modules, so their
statistics are buffers: they are saved in `state_dict()` and updated inside compiled regions as
BatchNorm's running statistics are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.errors import OpArgumentError
from ...core.tensors import Tensor
from ..module import Module

# The bias's fake quantization, `eager.quantization.fake_quant_bias`. That package sits above
# this one (its observers are Modules), so it hands the function down when imported (the
# project's seam: the lower module owns it, the upper fills it). Only fake quantizers made by
# a qconfig quantize a bias, and making them imported the package.
BiasQuantizer = Callable[[Tensor | None, Tensor, Tensor], Tensor | None]
_bias_quantizer: list[BiasQuantizer] = []


def use_bias_quantizer(fn: BiasQuantizer) -> None:
    """Install `fn(bias, inp, w_qat)` as the bias's fake quantization (eager.quantization's)."""
    _bias_quantizer[:] = [fn]


def _enabled(q: Any) -> bool:
    return q is not None and bool(getattr(q, "enabled", True))


class QATModule(Module):
    """Base class of the quantization-aware modules: a float module whose weight and output
    go through `weight_observer`/`weight_fake_quant` and `act_observer`/`act_fake_quant` (None
    until `set_qconfig`). Make one from a float module with `from_float_module`, or a whole
    model's with `eager.quantization.quantize_qat`."""

    with_weight = True  # whether it has a weight to observe and fake-quantize
    with_act = True  # whether its output is observed and fake-quantized

    def __init__(self) -> None:
        super().__init__()
        # observers and fake quantizers (eager.quantization's, or any with their methods)
        self.weight_observer: Any = None
        self.act_observer: Any = None
        self.weight_fake_quant: Any = None
        self.act_fake_quant: Any = None

    def __repr__(self) -> str:
        return "QAT." + super().__repr__()

    def set_qconfig(self, qconfig: Any) -> None:
        """Make the observers and fake quantizers from `qconfig`'s factories (a field that is
        None leaves none), for the weight where the module has one and for the output."""
        def make(factory: Callable[[], Module] | None) -> Module | None:
            return factory() if factory is not None else None

        if self.with_act:
            self.act_observer = make(qconfig.act_observer)
            self.act_fake_quant = make(qconfig.act_fake_quant)
        if self.with_weight:
            self.weight_observer = make(qconfig.weight_observer)
            self.weight_fake_quant = make(qconfig.weight_fake_quant)

    def _switch(self, used: bool, what: Any, enable: bool) -> None:
        if not used or what is None:
            return
        if enable:
            what.enable()
        else:
            what.disable()

    def set_fake_quant(self, enable: bool) -> None:
        """Enable or disable both fake quantizers (disabled, they pass values through)."""
        self._switch(self.with_act, self.act_fake_quant, enable)
        self._switch(self.with_weight, self.weight_fake_quant, enable)

    def set_observer(self, enable: bool) -> None:
        """Enable or disable both observers (disabled, they stop updating their statistics)."""
        self._switch(self.with_act, self.act_observer, enable)
        self._switch(self.with_weight, self.weight_observer, enable)

    def _apply_fakequant_with_observer(self, target: Tensor, fake_quant: Any,
                                       observer: Any) -> Tensor:
        """`target` observed, then fake-quantized with the observer's qparams; the result
        carries the qparams it was quantized with (a learned quantizer's own where it has
        them), which a following bias quantization reads."""
        out, qparams = target, None
        if observer is not None:
            out = observer(target)
            qparams = observer.get_qparams()
        if fake_quant is not None:
            out = fake_quant(out, qparams)
            if hasattr(fake_quant, "get_qparams"):
                qparams = fake_quant.get_qparams()
        if qparams is not None:
            out.qparams.update(qparams)
        return out

    def apply_quant_weight(self, target: Tensor) -> Tensor:
        """`target` through the weight's observer and fake quantizer."""
        return self._apply_fakequant_with_observer(target, self.weight_fake_quant,
                                                   self.weight_observer)

    def apply_quant_activation(self, target: Tensor) -> Tensor:
        """`target` through the activation's observer and fake quantizer."""
        return self._apply_fakequant_with_observer(target, self.act_fake_quant,
                                                   self.act_observer)

    def apply_quant_bias(self, target: Tensor | None, inp: Tensor,
                         w_qat: Tensor) -> Tensor | None:
        """`target`, a bias, fake-quantized to qint32 with scale input scale x weight scale
        (`fake_quant_bias`) while both fake quantizers are enabled; else `target` itself. The
        activation's quantizer decides for the bias too, the two sharing one dtype."""
        if not (_enabled(self.act_fake_quant) and _enabled(self.weight_fake_quant)):
            return target
        assert _bias_quantizer, "eager.quantization was not imported, yet made fake quantizers"
        return _bias_quantizer[0](target, inp, w_qat)

    def _ask(self, method: str, fake_quant: Any, observer: Any) -> Any:
        """`method()` of the fake quantizer where it has one, else of the observer, else None."""
        for source in (fake_quant, observer):
            if hasattr(source, method):
                return getattr(source, method)()
        return None

    def get_weight_dtype(self) -> Any:
        """The weight's quantized dtype (with its scale and zero point), from the qconfig."""
        return self._ask("get_quantized_dtype", self.weight_fake_quant, self.weight_observer)

    def get_activation_dtype(self) -> Any:
        """The output's quantized dtype (with its scale and zero point), from the qconfig."""
        return self._ask("get_quantized_dtype", self.act_fake_quant, self.act_observer)

    def get_weight_qparams(self) -> Any:
        """The weight's quantization parameters (`QParams`), or None without a qconfig."""
        return self._ask("get_qparams", self.weight_fake_quant, self.weight_observer)

    def get_activation_qparams(self) -> Any:
        """The output's quantization parameters (`QParams`), or None without a qconfig."""
        return self._ask("get_qparams", self.act_fake_quant, self.act_observer)

    @classmethod
    def from_float_module(cls, float_module: Any) -> QATModule:
        """The QAT module computing what `float_module` does, sharing its parameters."""
        raise OpArgumentError(f"{cls.__name__} does not define from_float_module: a QAT module "
                              "class converts its float module there")
