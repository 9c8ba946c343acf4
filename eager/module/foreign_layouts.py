"""MegEngine's and PyTorch's ways of storing some parameters, converted when a state dict
loads (`Module.load_state_dict`; `Optimizer.load_state_dict` uses `fit` for its slots).

Parameters here have MegEngine 1.13's shapes; what PyTorch (and this project before it took
MegEngine's shapes) writes is converted (in the file -> here):

- grouped and depthwise convolution weights: `(out, in/groups, *k)` -> `(groups, out/groups,
  in/groups, *k)`; grouped transposed ones: `(in, out/groups, *k)` -> `(groups, in/groups,
  out/groups, *k)`;
- per-channel vectors (conv biases, BatchNorm statistics, PReLU's weight): `(C,)` <->
  `(1, C, 1, ..., 1)` (`Module._load` does it);

and what MegEngine writes in a layout of its own:

- `LayerNorm((3, 4))` weight and bias: `(12,)` -> `(3, 4)`;
- `RNN`, `LSTM`: `_flatten_weights` (see `_split_rnn`) -> `weight_ih_l0`, `weight_hh_l0`,
  `bias_ih_l0`, `bias_hh_l0`, ... (`_reverse` too); its `cells.<layer>.<direction>.*` are
  parameters MegEngine's forward never reads, and are dropped;
- `MultiHeadAttention(E, heads)`: `io_weight_bias` of shape `(1, 4E*E + 4E)` (see
  `_split_attention`) -> `in_proj_weight`, `in_proj_bias`, `out_proj.weight`, `out_proj.bias`;

and from PyTorch, BatchNorm's `num_batches_tracked` counter, which nothing here uses, is
dropped. A value is converted only when its shape is exactly the foreign layout of the shape
expected here; anything else is left to `load_state_dict`'s own key and shape checks, and a
packed buffer of the wrong size raises, naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import CheckpointError
from ..tensors import Tensor
from .conv import _ConvNd
from .module import Module, _per_channel
from .multiheadattn import MultiHeadAttention
from .normalization import LayerNorm
from .rnn import _GATES, _RNNBase


def _grouped(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Whether `got` and `want` are the grouped (groups, a, b, *k) and flat (groups * a, b, *k)
    layouts of one conv weight, either way round."""
    if len(got) < len(want):
        got, want = want, got
    return len(got) == len(want) + 1 and len(want) >= 3 and got[0] * got[1] == want[0] \
        and got[2:] == want[1:]


def _flat(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Whether `got` is MegEngine's flattened layout of the (LayerNorm) shape `want`."""
    return len(got) == 1 and len(want) > 1 and got[0] == math.prod(want)


def fit(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`value` as an array of `shape` when it is stored in a foreign layout of that shape
    (MegEngine's per-channel `(1, C, 1, 1)`, grouped conv or flattened vector), else as it is."""
    a = _array(value)
    if any(rule(a.shape, shape) for rule in (_per_channel, _grouped, _flat)):
        return a.reshape(shape)
    return a


def convert(module: Module, state: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `state` with the foreign layouts of `module` and its sub-modules converted."""
    out = dict(state)
    for prefix, m in module.named_modules():
        p = f"{prefix}." if prefix else ""
        # `getattr`: a reparametrisation (the zoo's spectral norm) may delete `weight`
        if isinstance(m, _ConvNd):
            groups = m.groups
            _reshape(out, f"{p}weight", getattr(m, "weight", None),
                     lambda got, want, g=groups: _grouped(got, want) and
                     (got if len(got) > len(want) else want)[0] == g)
        elif isinstance(m, LayerNorm):
            _reshape(out, f"{p}weight", getattr(m, "weight", None), _flat)
            _reshape(out, f"{p}bias", getattr(m, "bias", None), _flat)
        elif isinstance(m, _RNNBase) and f"{p}_flatten_weights" in out:
            out.update(_split_rnn(m, p, out))
        elif isinstance(m, MultiHeadAttention) and f"{p}io_weight_bias" in out:
            out.update(_split_attention(m, p, out.pop(f"{p}io_weight_bias")))
        if hasattr(m, "running_mean"):  # the BatchNorm family: PyTorch's counter
            out.pop(f"{p}num_batches_tracked", None)
    return out


def _array(value: Any) -> np.ndarray:
    return np.asarray(value.numpy() if isinstance(value, Tensor) else value)


def _reshape(out: dict[str, Any], key: str, own: Tensor | None, rule: Callable) -> None:
    """Reshape `out[key]` to `own`'s shape where `rule` says it is its foreign layout."""
    if own is not None and key in out:
        a = _array(out[key])
        if rule(a.shape, own.shape):
            out[key] = a.reshape(own.shape)


def _pieces(flat: np.ndarray, shapes: list[tuple[str, tuple[int, ...]]],
            where: str) -> Iterator[tuple[str, np.ndarray]]:
    """Consecutive runs of `flat`, each reshaped, named as `shapes` says."""
    need = sum(math.prod(shape) for _, shape in shapes)
    if flat.size != need:
        raise CheckpointError(f"load_state_dict: {where} holds {flat.size} values, but this "
                              f"module needs {need}; build it with the sizes of the module that "
                              "saved it")
    start = 0
    for name, shape in shapes:
        n = math.prod(shape)
        yield name, flat[start:start + n].reshape(shape)
        start += n


def _split_rnn(m: _RNNBase, p: str, out: dict[str, Any]) -> dict[str, np.ndarray]:
    """MegEngine's `_flatten_weights` (gates*H, columns): its memory holds, for each layer and
    direction in turn, weight_ih, weight_hh, bias_ih and bias_hh, each raveled (the 2-d shape
    only sizes the buffer). Its `cells.*` copies are dropped: MegEngine's forward reads only
    the flat buffer, so they hold the initial values."""
    for key in [k for k in out if k.startswith(f"{p}cells.")]:
        del out[key]
    gates, h = _GATES[m._mode] * m.hidden_size, m.hidden_size
    shapes: list[tuple[str, tuple[int, ...]]] = []
    for layer in range(m.num_layers):
        size = m.input_size if layer == 0 else h * m._directions
        for suffix in m._suffixes:
            shapes += [(f"weight_ih_l{layer}{suffix}", (gates, size)),
                       (f"weight_hh_l{layer}{suffix}", (gates, h))]
            if m.bias:
                shapes += [(f"bias_ih_l{layer}{suffix}", (gates,)),
                           (f"bias_hh_l{layer}{suffix}", (gates,))]
    flat = _array(out.pop(f"{p}_flatten_weights")).reshape(-1)
    return {p + name: a for name, a in _pieces(flat, shapes, f"{p}_flatten_weights")}


def _split_attention(m: MultiHeadAttention, p: str, packed: Any) -> dict[str, np.ndarray]:
    """MegEngine's `io_weight_bias` (1, 4E*E [+ 4E]): the query, key, value and output
    projections, each stored (in, out), so transposed, then their four biases."""
    e, bias = m.embed_dim, m.in_proj_bias is not None
    shapes: list[tuple[str, tuple[int, ...]]] = [(name, (e, e)) for name in ("q", "k", "v", "o")]
    shapes += [(f"b{name}", (e,)) for name in ("q", "k", "v", "o")] if bias else []
    got = dict(_pieces(_array(packed).reshape(-1), shapes, f"{p}io_weight_bias"))
    out = {f"{p}in_proj_weight": np.concatenate([got[k].T for k in "qkv"]),
           f"{p}out_proj.weight": got["o"].T}
    if bias:
        out[f"{p}in_proj_bias"] = np.concatenate([got[f"b{k}"] for k in "qkv"])
        out[f"{p}out_proj.bias"] = got["bo"]
    return out
