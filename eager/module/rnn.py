"""Recurrent layers: the cells `RNNCell`, `LSTMCell`, `GRUCell` and the sequence layers `RNN`,
`LSTM`, `GRU`, with PyTorch's (and MegEngine's) gate layout.

A sequence layer keeps its weights as MegEngine does: one parameter, `_flatten_weights` of shape
(gates*H, columns), whose memory holds for each layer and direction in turn weight_ih, weight_hh,
bias_ih and bias_hh, each raveled; the forward reads only it. Beside it, `cells[layer][direction]`
hold cells whose parameters MegEngine creates and never reads: they are in `parameters()`,
state dicts and optimizer states, as there. PyTorch's per-layer `weight_ih_l0`, ... load into
`_flatten_weights` by name (`_load_layouts`).

Gates are stacked in the rows of `weight_ih` (gates*H, I) and `weight_hh` (gates*H, H): LSTM
(input, forget, cell, output), GRU (reset, update, new). GRU applies the reset gate to the
hidden part of the candidate after its bias: n = tanh(x W_in + b_in + r * (h W_hn + b_hn)).
Every weight and bias starts U(-1/sqrt(H), 1/sqrt(H)).

Sequence layers are built from ordinary ops, one recurrence step after another: the input
projection of all time steps is a single matmul, the recurrence a Python loop, so eager autodiff
and capture (`partial_trace` unrolls it) need nothing special.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .. import functional as F
from ..core.creation import zeros
from ..core.errors import CheckpointError, OpArgumentError
from ..core.tensors import Parameter, Tensor
from ..serialization import layouts
from . import init
from .module import Module

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _uniform(shape: tuple[int, ...], hidden_size: int) -> Parameter:
    p = Parameter(zeros(shape))
    init.fan_in_uniform_(p, hidden_size)
    return p


def _rnn_step(act: Callable[[Tensor], Tensor]) -> Callable:
    def step(gx: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
        return act(gx + F.linear(h, w_hh, b_hh))
    return step


def _lstm_step(gx: Tensor, state: tuple[Tensor, Tensor], w_hh: Tensor,
               b_hh: Tensor | None) -> tuple[Tensor, Tensor]:
    h, c = state
    i, f, g, o = F.split(gx + F.linear(h, w_hh, b_hh), 4, axis=-1)
    c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    return F.sigmoid(o) * F.tanh(c), c


def _gru_step(gx: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    xr, xz, xn = F.split(gx, 3, axis=-1)
    hr, hz, hn = F.split(F.linear(h, w_hh, b_hh), 3, axis=-1)
    r, z = F.sigmoid(xr + hr), F.sigmoid(xz + hz)
    n = F.tanh(xn + r * hn)
    return n + z * (h - n)  # (1 - z) * n + z * h


def _step_of(mode: str) -> Callable:
    if mode == "LSTM":
        return _lstm_step
    if mode == "GRU":
        return _gru_step
    return _rnn_step(F.relu if mode == "RNN_RELU" else F.tanh)


def _mode(nonlinearity: str, who: str) -> str:
    if nonlinearity not in ("tanh", "relu"):
        raise OpArgumentError(f"{who}: nonlinearity must be 'tanh' or 'relu', got "
                              f"{nonlinearity!r}")
    return "RNN_" + nonlinearity.upper()


def _check_input(who: str, x: Tensor, batched_ndim: int, size: int) -> bool:
    """Check the feature axis; return whether `x` has a batch axis."""
    if x.ndim not in (batched_ndim, batched_ndim - 1) or x.shape[-1] != size:
        raise OpArgumentError(
            f"{who}: expects input of {batched_ndim} (batched) or {batched_ndim - 1} axes with "
            f"{size} features last, got shape {x.shape}")
    return x.ndim == batched_ndim


def _check_state(who: str, name: str, t: Tensor, shape: tuple[int, ...]) -> None:
    if tuple(t.shape) != shape:
        raise OpArgumentError(f"{who}: {name} must have shape {shape}, got {tuple(t.shape)}")


# ----- cells ------------------------------------------------------------------------------------
class _Cell(Module):
    _mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 mode: str | None = None):
        super().__init__()
        self._mode = mode or self._mode
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates = _GATES[self._mode] * hidden_size
        self.weight_ih = _uniform((gates, input_size), hidden_size)
        self.weight_hh = _uniform((gates, hidden_size), hidden_size)
        self.bias_ih = _uniform((gates,), hidden_size) if bias else None
        self.bias_hh = _uniform((gates,), hidden_size) if bias else None

    def _prepare(self, x: Tensor, hx: Any) -> tuple[Tensor, Any, bool]:
        """Add a batch axis to unbatched input and state; zeros for a missing state."""
        who = type(self).__name__
        batched = _check_input(who, x, 2, self.input_size)
        if not batched:
            x = x.reshape(1, -1)
        shape = (x.shape[0], self.hidden_size)
        lstm = self._mode == "LSTM"
        if hx is None:
            hx = (zeros(shape, x.dtype), zeros(shape, x.dtype)) if lstm else zeros(shape, x.dtype)
        parts = tuple(hx) if lstm else (hx,)
        if lstm and len(parts) != 2:
            raise OpArgumentError(f"{who}: hx must be a pair (h, c), got {len(parts)} tensors")
        if not batched:
            parts = tuple(p.reshape(1, -1) for p in parts)
        for name, p in zip(("h", "c"), parts):
            _check_state(who, name if lstm else "hx", p, shape)
        return x, (parts if lstm else parts[0]), batched

    def forward(self, x: Tensor, hx: Any = None) -> Any:
        x, state, batched = self._prepare(x, hx)
        gx = F.linear(x, self.weight_ih, self.bias_ih)
        out = _step_of(self._mode)(gx, state, self.weight_hh, self.bias_hh)
        if batched:
            return out
        return tuple(t.reshape(-1) for t in out) if isinstance(out, tuple) else out.reshape(-1)

    def _extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias}"


class RNNCell(_Cell):
    """One Elman step: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu.

    `forward(x, hx=None)` takes x (N, I) or (I,) and h (N, H) or (H,) (zeros if None) and
    returns h'.
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh"):
        super().__init__(input_size, hidden_size, bias, _mode(nonlinearity, "RNNCell"))
        self.nonlinearity = nonlinearity


class LSTMCell(_Cell):
    """One LSTM step: `forward(x, hx=None)` takes `hx = (h, c)` (zeros if None) and returns
    `(h', c')`."""

    _mode = "LSTM"


class GRUCell(_Cell):
    """One GRU step: `forward(x, hx=None)` returns h'."""

    _mode = "GRU"


# ----- sequence layers --------------------------------------------------------------------------
class _RNNBase(Module):
    _mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 mode: str | None = None):
        super().__init__()
        self._mode = mode or self._mode
        who = type(self).__name__
        if int(num_layers) < 1:
            raise OpArgumentError(f"{who}: num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= float(dropout) < 1.0:
            raise OpArgumentError(f"{who}: dropout must be in [0, 1), got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional = bidirectional
        # MegEngine's layout: one parameter, `_flatten_weights`, that the forward reads, and
        # per-layer cells whose own parameters it never reads (MegEngine keeps them, so its
        # checkpoints, optimizer states and `parameters()` order count them too)
        self.cells = [[self._cell(layer) for _ in range(self._directions)]
                      for layer in range(num_layers)]
        gates = _GATES[self._mode] * hidden_size
        self._flatten_weights = _uniform((gates, self._flat_size() // gates), hidden_size)

    def _cell(self, layer: int) -> _Cell:
        size = self.input_size if layer == 0 else self.hidden_size * self._directions
        return _Cell(size, self.hidden_size, self.bias, self._mode)

    def _pieces(self) -> list[tuple[str, tuple[int, ...]]]:
        """The runs of `_flatten_weights`'s memory, in order: for each layer and direction,
        weight_ih, weight_hh, bias_ih and bias_hh (PyTorch's names, MegEngine's order)."""
        gates, h = _GATES[self._mode] * self.hidden_size, self.hidden_size
        out: list[tuple[str, tuple[int, ...]]] = []
        for layer in range(self.num_layers):
            size = self.input_size if layer == 0 else h * self._directions
            for suffix in self._suffixes:
                out += [(f"weight_ih_l{layer}{suffix}", (gates, size)),
                        (f"weight_hh_l{layer}{suffix}", (gates, h))]
                if self.bias:
                    out += [(f"bias_ih_l{layer}{suffix}", (gates,)),
                            (f"bias_hh_l{layer}{suffix}", (gates,))]
        return out

    def _flat_size(self) -> int:
        return sum(math.prod(shape) for _, shape in self._pieces())

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    def _load_layouts(self, state: dict[str, Any], prefix: str) -> None:
        """PyTorch's per-layer weights (`weight_ih_l0`, ..., `_reverse`; what this project
        kept before it took MegEngine's layout) packed into `_flatten_weights`, and copied
        into the cells, which PyTorch has no counterpart of."""
        super()._load_layouts(state, prefix)
        pieces = self._pieces()
        if prefix + pieces[0][0] not in state or f"{prefix}_flatten_weights" in state:
            return
        arrays = []
        for name, shape in pieces:
            value = layouts.array(state.pop(prefix + name, None))
            if value.shape != shape:
                raise CheckpointError(f"load_state_dict: {prefix}{name} has shape {value.shape},"
                                      f" but this {type(self).__name__} needs {shape}; build it "
                                      "with the sizes of the module that saved it")
            arrays.append(value.reshape(-1))
            layer, direction = _layer_of(name)
            state[f"{prefix}cells.{layer}.{direction}.{name.split('_l')[0]}"] = value
        gates = pieces[0][1][0]
        state[f"{prefix}_flatten_weights"] = np.concatenate(arrays).reshape(gates, -1)

    def _weights(self, layer: int, suffix: str) -> tuple:
        """This layer and direction's (weight_ih, weight_hh, bias_ih, bias_hh), read from
        `_flatten_weights` (biases None without `bias`)."""
        flat, start, found = self._flatten_weights.reshape(-1), 0, {}
        for name, shape in self._pieces():
            n = math.prod(shape)
            if name.endswith(f"_l{layer}{suffix}"):
                found[name.split("_l")[0]] = flat[start:start + n].reshape(shape)
            start += n
        return tuple(found.get(kind) for kind in ("weight_ih", "weight_hh", "bias_ih",
                                                   "bias_hh"))

    def _initial(self, x: Tensor, hx: Any, batched: bool) -> list:
        """The initial state as a list over (layer, direction) of h or (h, c), batched."""
        who, lstm = type(self).__name__, self._mode == "LSTM"
        shape = (self.num_layers * self._directions, x.shape[1], self.hidden_size)
        if hx is None:
            parts = [zeros(shape, x.dtype)] * (2 if lstm else 1)
        else:
            parts = list(hx) if lstm else [hx]
            if lstm and len(parts) != 2:
                raise OpArgumentError(f"{who}: hx must be a pair (h_0, c_0), got {len(parts)}")
            if not batched:
                parts = [p.reshape(p.shape[0], 1, -1) if p.ndim == 2 else p for p in parts]
            for name, p in zip(("h_0", "c_0") if lstm else ("h_0",), parts):
                _check_state(who, name, p, shape)
        per = [[p[k] for p in parts] for k in range(shape[0])]
        return [tuple(s) for s in per] if lstm else [s[0] for s in per]

    def forward(self, x: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        """Run the sequence; returns (output, final state) as PyTorch: output (L, N, D*H)
        ((N, L, D*H) with batch_first), state h_n (or (h_n, c_n)) of shape (layers*D, N, H)."""
        who = type(self).__name__
        batched = _check_input(who, x, 3, self.input_size)
        if not batched:
            x = x.reshape(x.shape[0], 1, -1)
        elif self.batch_first:
            x = x.transpose(1, 0, 2)
        states = self._initial(x, hx, batched)
        step, finals = _step_of(self._mode), []
        for layer in range(self.num_layers):
            if layer and self.dropout and self.training:
                x = F.dropout(x, self.dropout)
            outs = []
            for d, suffix in enumerate(self._suffixes):
                state = states[layer * self._directions + d]
                out, state = _run(step, x, state, self._weights(layer, suffix), bool(d))
                outs.append(out)
                finals.append(state)
            x = outs[0] if len(outs) == 1 else F.concat(outs, axis=2)
        return self._pack(x, finals, batched)

    def _pack(self, out: Tensor, finals: list, batched: bool) -> tuple[Tensor, Any]:
        if self._mode == "LSTM":
            state: Any = tuple(F.stack([s[i] for s in finals]) for i in range(2))
        else:
            state = F.stack(finals)
        if not batched:  # drop the batch axis of size 1 again: (L, H), (layers * D, H)
            out, state = jax.tree.map(lambda t: t.reshape(t.shape[0], -1), (out, state),
                                      is_leaf=lambda t: isinstance(t, Tensor))
        elif self.batch_first:
            out = out.transpose(1, 0, 2)
        return out, state

    def _extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"batch_first={self.batch_first}, bidirectional={self.bidirectional}")


def _layer_of(name: str) -> tuple[int, int]:
    """(layer, direction) of a PyTorch name such as `weight_hh_l1_reverse`."""
    tail = name.split("_l")[1]
    return int(tail.split("_")[0]), int(tail.endswith("_reverse"))


def _run(step: Callable, x: Tensor, state: Any, weights: tuple, reverse: bool) -> tuple:
    """One direction of one layer over time-major x (L, N, I): outputs (L, N, H), last state."""
    w_ih, w_hh, b_ih, b_hh = weights
    gx = F.linear(x, w_ih, b_ih)  # every time step's input projection in one matmul
    outs = []
    for t in reversed(range(x.shape[0])) if reverse else range(x.shape[0]):
        state = step(gx[t], state, w_hh, b_hh)
        outs.append(state[0] if isinstance(state, tuple) else state)
    if reverse:
        outs.reverse()
    return F.stack(outs), state


class RNN(_RNNBase):
    """A multi-layer Elman RNN (tanh or relu) over a sequence; returns (output, h_n)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, _mode(nonlinearity, "RNN"))
        self.nonlinearity = nonlinearity


class LSTM(_RNNBase):
    """A multi-layer LSTM over a sequence: `forward(x, hx=None)` with `hx = (h_0, c_0)`, each
    (num_layers * directions, N, H); returns `(output, (h_n, c_n))`."""

    _mode = "LSTM"


class GRU(_RNNBase):
    """A multi-layer GRU over a sequence: `forward(x, hx=None)`; returns `(output, h_n)`."""

    _mode = "GRU"
