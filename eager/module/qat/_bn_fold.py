"""BatchNorm folding for the QAT forms of MegEngine's ConvBn2d, ConvTransposeBn2d and
LinearBn1d (and their Relu forms): what they share.

An int8 deployment runs conv-then-BatchNorm as one convolution with the folded weight
w * gamma / sqrt(var + eps) and bias beta + gamma * (b - mean) / sqrt(var + eps), so training
quantizes that folded weight. MegEngine's way, followed here: in training (`approx=True`,
what `forward` uses) the folded weight is built from the running variance and fake-quantized,
the layer's output is divided back by the folding factor, the layer's own bias added, and the
BatchNorm applied in training mode (batch statistics, running statistics updated); in eval the
layer runs with the folded weight and folded bias, which is what the int8 module computes.
`approx=False` in training folds with this batch's statistics instead, computed from a float
pass of the layer, and updates the running statistics itself.
"""

from __future__ import annotations

from typing import Any

from ... import functional as F
from ...core.context import atomic
from ...core.creation import ones, zeros
from ...core.tensors import Tensor, rebind
from .module import QATModule


class _BnFold(QATModule):
    """The folding, given the layer (`_layer`), how the layer runs with another weight and
    bias (`_calc`) and how a per-output-channel factor scales its weight (`_scale_weight`)."""

    bn: Any  # the float module's BatchNorm

    def _layer(self) -> Any:
        raise NotImplementedError  # each subclass names its layer

    def _calc(self, inp: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        raise NotImplementedError

    def _scale_weight(self, weight: Tensor, factor: Tensor) -> Tensor:
        raise NotImplementedError

    def get_batch_mean_var(self, inp: Tensor) -> tuple[Tensor, Tensor]:
        """Per-channel (axis 1) mean and biased variance of `inp`, as MegEngine computes them
        (E[x^2] - E[x]^2 from the two sums), shaped to broadcast against `inp`."""
        axes = (0, *range(2, inp.ndim))
        n = inp.size / inp.shape[1]
        s1 = inp.sum(axis=axes, keepdims=True)
        s2 = (inp * inp).sum(axis=axes, keepdims=True)
        return s1 / n, (s2 - s1 * s1 / n) / n

    def update_running_mean_and_running_var(self, bn_mean: Tensor, bn_var: Tensor,
                                            num_elements_per_channel: float) -> None:
        """Move the BatchNorm's running statistics towards a batch's, with its momentum (the
        variance made unbiased); no gradient flows into them."""
        bn, n = self.bn, num_elements_per_channel
        if bn.running_mean is None or bn.running_var is None:
            return
        m = bn.momentum
        mean = bn_mean.detach().reshape(bn.running_mean.shape)
        var = (bn_var.detach() * (n / (n - 1))).reshape(bn.running_var.shape)
        new_mean = bn.running_mean * m + mean * (1 - m)
        new_var = bn.running_var * m + var * (1 - m)
        with atomic():  # both statistics, or (a signal before) neither
            rebind(bn.running_mean, new_mean)
            rebind(bn.running_var, new_var)

    def _affine(self) -> tuple[Tensor, Tensor]:
        """The BatchNorm's gamma and beta as (C,): ones and zeros where it has none."""
        bn, c = self.bn, self.bn.num_features
        gamma = bn.weight.reshape(-1) if bn.weight is not None else ones((c,))
        beta = bn.bias.reshape(-1) if bn.bias is not None else zeros((c,))
        return gamma, beta

    def _folded_bias(self, mean: Tensor, istd: Tensor) -> Tensor:
        """beta + gamma * (b - mean) / std, in the layer's bias shape."""
        layer, (gamma, beta) = self._layer(), self._affine()
        c = self.bn.num_features
        bias = layer.bias.reshape(-1) if layer.bias is not None else zeros((c,))
        shape = layer.bias.shape if layer.bias is not None else self._bias_shape()
        return (beta + gamma * (bias - mean) * istd).reshape(shape)

    def _bias_shape(self) -> tuple[int, ...]:
        return (1, self.bn.num_features, 1, 1)  # a convolution's, MegEngine's layout

    def _statistics(self, mean: Tensor | None, var: Tensor | None) -> tuple[Tensor, Tensor]:
        """`mean` and `var` as (C,), zeros and ones where None."""
        c = self.bn.num_features
        return (mean.reshape(-1) if mean is not None else zeros((c,)),
                var.reshape(-1) if var is not None else ones((c,)))

    def fold_weight_bias(self, bn_mean: Tensor | None,
                         bn_var: Tensor | None) -> tuple[Tensor, Tensor]:
        """The folded weight, fake-quantized, and the folded bias, for these statistics."""
        mean, var = self._statistics(bn_mean, bn_var)
        gamma, _ = self._affine()
        istd = 1.0 / F.sqrt(var + self.bn.eps)
        w_fold = self.apply_quant_weight(self._scale_weight(self._layer().weight, gamma * istd))
        return w_fold, self._folded_bias(mean, istd)

    def _calc_bn_qat(self, inp: Tensor, approx: bool = True) -> Tensor:
        """The layer and its BatchNorm with the folded weight quantized (see the module's
        docstring), before the output's quantization."""
        layer, bn = self._layer(), self.bn
        if self.training and not approx:
            y = layer(inp)
            bn_mean, bn_var = self.get_batch_mean_var(y)
            self.update_running_mean_and_running_var(bn_mean, bn_var, y.size / y.shape[1])
        else:
            bn_mean, bn_var = bn.running_mean, bn.running_var
        mean, var = self._statistics(bn_mean, bn_var)
        gamma, _ = self._affine()
        istd = 1.0 / F.sqrt(var + bn.eps)
        factor = gamma * istd
        refold = self.training and approx  # the BatchNorm itself runs after the layer
        w_qat = self.apply_quant_weight(self._scale_weight(layer.weight, factor))
        b_qat = self.apply_quant_bias(None if refold else self._folded_bias(mean, istd), inp,
                                      w_qat)
        y = self._calc(inp, w_qat, b_qat)
        if not refold:
            return y
        channel = (1, -1) + (1,) * (y.ndim - 2)
        y = y / factor.reshape(channel)  # the layer's own output, from the quantized weight
        if layer.bias is not None:
            y = y + layer.bias.reshape(channel)
        return bn(y)
