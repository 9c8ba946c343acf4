"""MegEngine's and PyTorch's ways of storing some parameters, converted when a state dict
loads: the rules for telling a foreign layout by its shape, used by each layer's
`Module._load_layouts` (`Module.load_state_dict`) and by `Optimizer.load_state_dict` (`fit`,
for its slots).

Parameters here have MegEngine 1.13's shapes; what PyTorch (and this project before it took
MegEngine's shapes) writes is converted (in the file -> here):

- grouped and depthwise convolution weights: `(out, in/groups, *k)` -> `(groups, out/groups,
  in/groups, *k)`; grouped transposed ones: `(in, out/groups, *k)` -> `(groups, in/groups,
  out/groups, *k)`;
- per-channel vectors (conv biases, BatchNorm statistics, PReLU's weight): `(C,)` <->
  `(1, C, 1, ..., 1)` (`per_channel`; `Module._load` does it);

and what MegEngine writes in a layout of its own:

- `LayerNorm((3, 4))` weight and bias: `(12,)` -> `(3, 4)`;
- `RNN`, `LSTM`, `GRU` keep MegEngine's `_flatten_weights` and `cells.*` as they are;
  PyTorch's `weight_ih_l0`, `weight_hh_l0`, `bias_ih_l0`, `bias_hh_l0`, ... (`_reverse` too)
  are packed into `_flatten_weights` and copied into the cells (`_RNNBase._load_layouts`);
- `MultiHeadAttention(E, heads)`: `io_weight_bias` of shape `(1, 4E*E + 4E)` (see
  `_split_attention`) -> `in_proj_weight`, `in_proj_bias`, `out_proj.weight`, `out_proj.bias`;

and from PyTorch, BatchNorm's `num_batches_tracked` counter, which nothing here uses, is
dropped. A value is converted only when its shape is exactly the foreign layout of the shape
expected here; anything else is left to `load_state_dict`'s own key and shape checks, and a
packed buffer of the wrong size raises, naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..core.errors import CheckpointError
from ..core.tensors import Tensor


def per_channel(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Whether `got` and `want` are two layouts of one per-channel vector: PyTorch's (C,) and
    MegEngine's (1, C, 1, ..., 1), either way round (also between two such shapes)."""
    def channels(shape: tuple[int, ...]) -> int | None:
        if len(shape) == 1:
            return shape[0]
        ok = len(shape) >= 3 and all(d == 1 for i, d in enumerate(shape) if i != 1)
        return shape[1] if ok else None

    c = channels(want)
    return got != want and c is not None and channels(got) == c


def grouped(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Whether `got` and `want` are the grouped (groups, a, b, *k) and flat (groups * a, b, *k)
    layouts of one conv weight, either way round."""
    if len(got) < len(want):
        got, want = want, got
    return len(got) == len(want) + 1 and len(want) >= 3 and got[0] * got[1] == want[0] \
        and got[2:] == want[1:]


def flat(got: tuple[int, ...], want: tuple[int, ...]) -> bool:
    """Whether `got` is MegEngine's flattened layout of the (LayerNorm) shape `want`."""
    return len(got) == 1 and len(want) > 1 and got[0] == math.prod(want)


def fit(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`value` as an array of `shape` when it is stored in a foreign layout of that shape
    (MegEngine's per-channel `(1, C, 1, 1)`, grouped conv or flattened vector), else as it is."""
    a = array(value)
    if any(rule(a.shape, shape) for rule in (per_channel, grouped, flat)):
        return a.reshape(shape)
    return a


def array(value: Any) -> np.ndarray:
    """A state dict's value (a Tensor, an array, a list) as a numpy array."""
    return np.asarray(value.numpy() if isinstance(value, Tensor) else value)


def reshape(out: dict[str, Any], key: str, own: Tensor | None, rule: Callable) -> None:
    """Reshape `out[key]` to `own`'s shape where `rule` says it is its foreign layout."""
    if own is not None and key in out:
        a = array(out[key])
        if rule(a.shape, own.shape):
            out[key] = a.reshape(own.shape)


def pieces(values: np.ndarray, shapes: list[tuple[str, tuple[int, ...]]],
           where: str) -> Iterator[tuple[str, np.ndarray]]:
    """Consecutive runs of the 1-d `values`, each reshaped, named as `shapes` says (MegEngine's
    packed RNN and attention weights)."""
    need = sum(math.prod(shape) for _, shape in shapes)
    if values.size != need:
        raise CheckpointError(f"load_state_dict: {where} holds {values.size} values, but this "
                              f"module needs {need}; build it with the sizes of the module that "
                              "saved it")
    start = 0
    for name, shape in shapes:
        n = math.prod(shape)
        yield name, values[start:start + n].reshape(shape)
        start += n
