"""`Tensor`, a jax array with autodiff and capture hooks, and `apply`, the one dispatcher.

Every computation on tensors goes through `apply(op, *inputs, **attrs)`: it reads each input's
storage (through the capture hook when one is active), calls the op's cached jitted forward, wraps
the outputs, and records a tape node when a GradManager records and an input is tracked. Every
change of a tensor's storage goes through `rebind`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

import jax
import jax.numpy as jnp
import numpy as np

from . import amp_policy as _amp
from . import device as _device
from . import ownership, tape
from . import profiling as _profiling
from . import ragged as _ragged
from .context import current as _current
from .errors import OpTypeError
from .op_errors import bad_argument as _bad_argument
from .op_errors import checked_dtype as _checked_dtype
from .op_errors import translate as _translate
from .ops import OPS, Op
from .quant_dtype import QParams, default_qparams
from .tensor_methods import TensorMethods, axis_arg, shape_arg

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from .device import DeviceLike

Axis = int | Sequence[int] | None  # one axis, several, or all (None)

_diff = tape.differentiable

_FLOAT = np.dtype(np.float32)
_INT = np.dtype(np.int32)


class Tensor(TensorMethods):
    """An n-dimensional array on a jax device, with autodiff.

    >>> import eager as eg
    >>> x = eg.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x * 2 + 1).sum().item()
    24.0
    """

    # `_len`: None, or the logical length of a ragged axis 0 (an int, an int32 device scalar, or
    # a traced int32 inside a region) whose storage `_data` is padded to a capacity (ragged.py).
    # `_holders`: who else holds `_data`, which decides whether it may be donated (ownership.py).
    # `__dict__`: user code may hang its own attributes on a tensor (`p.grad_backup = ...`), as
    # MegEngine and PyTorch allow; the dict is only made when one is set.
    __slots__ = ("_data", "_node", "_out_idx", "_tracked", "_grad", "_len", "_holders",
                 "__weakref__", "__dict__")
    _data: Any  # a jax array; a tracer while a capture reads it
    _node: tape.Node | None
    _out_idx: int
    _tracked: int
    _grad: Tensor | None
    _len: Any
    _holders: list | None
    __array_priority__ = 1000
    __array_ufunc__ = None  # numpy defers `ndarray op Tensor` to Tensor's reflected operators
    # a quantized tensor's dtype (qint8(scale), ...), its array the integer storage; a class
    # default, so that ordinary tensors never make their `__dict__` (quantized_tensors.py)
    _qdtype: np.dtype | None = None

    def __init__(self, data: Any, dtype: DTypeLike | None = None, device: DeviceLike = None):
        if getattr(dtype, "metadata", None) or getattr(data, "_qdtype", None) is not None or (
                isinstance(data, np.ndarray) and data.dtype.metadata):
            data, dtype, qdtype = above.quantized_init(data, dtype)
            self._qdtype = qdtype
            QUANTIZED[0] = True
        if _profiling.ON and not isinstance(data, (jax.Array, Tensor)) and _current() is None:
            with _profiling.timed("transfer", "to device") as outs:
                self._data = to_array(data, dtype, device)
                outs.append(self._data)
        else:
            self._data = to_array(data, dtype, device)
        self._node = None
        self._out_idx = 0
        self._tracked = 0
        self._grad = None
        self._len = None
        self._holders = None
        if (h := _current()) is not None:
            h.created(self)
        if isinstance(data, Tensor):  # maybe its array (a cast or a move is a new one)
            ownership.share(self, data)
        elif isinstance(data, jax.Array):  # maybe the caller's own buffer
            ownership.hand_out(self)

    # ----- properties -----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        if self._len is None:
            return tuple(self._data.shape)
        return (_ragged.length_dim(self), *self._data.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        q = self._qdtype
        return np.dtype(self._data.dtype) if q is None else q

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        if self._len is None:
            return int(np.prod(self._data.shape, dtype=np.int64))
        return _ragged.length_dim(self) * int(np.prod(self._data.shape[1:], dtype=np.int64))

    @property
    def sharding(self) -> jax.sharding.Sharding | None:
        """How the array is laid out over devices (a `jax.sharding.Sharding`; None while the
        value is being captured or computed lazily: the compiled program decides)."""
        data = self._data
        return None if isinstance(data, jax.core.Tracer) else getattr(data, "sharding", None)

    @property
    def device(self) -> str:
        devices = getattr(self._data, "devices", None)
        if devices is None or isinstance(self._data, jax.core.Tracer):
            return _device.get_default_device()
        return _device.name_of(next(iter(devices())))

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (a Tensor) or None; assignable."""
        if (h := _current()) is not None:
            h.grad_read(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f".grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape:
                raise ValueError(f".grad of shape {value.shape} for a tensor of shape {self.shape}")
        if (h := _current()) is not None:
            h.grad_write(self, value)
        self._grad = value

    @property
    def qparams(self) -> QParams:
        """How fake quantization quantized this tensor (MegEngine's `Tensor.qparams`): a
        `QParams`, made on first read with None fields and updated in place by
        `fake_quant_tensor`; `fake_quant_bias` reads it. It lives in the instance dict, so a
        tensor that never reads it pays nothing, and a compiled region's outputs (new
        tensors) start with the default again, as the tensors MegEngine's trace returns do."""
        found = self.__dict__.get("_qparams")
        if found is None:
            found = self.__dict__["_qparams"] = default_qparams()
        return found

    # ----- value reads ----------------------------------------------------------------------
    def _host(self, what: str) -> np.ndarray:
        if (h := _current()) is not None:
            h.value_read(self, what)
        if _profiling.ON:
            with _profiling.timed("host sync", what):
                a = np.asarray(self._data)
        else:
            a = np.asarray(self._data)
        return a if self._len is None else a[:_ragged.host_length(self)]  # logical rows

    def numpy(self) -> np.ndarray:
        """A numpy copy of the value (a host read)."""
        a = np.array(self._host(".numpy()"))
        return a if self._qdtype is None else a.view(self._qdtype)  # as MegEngine: qint8 data

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number."""
        return self._scalar(".item()")

    def _scalar(self, what: str) -> Any:
        if self.size != 1:
            raise ValueError(f"{what} needs a one-element tensor, got shape {self.shape}")
        return self._host(what).item()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"the truth value of a tensor of shape {self.shape} is ambiguous; use .any()/.all()"
            )
        return bool(self._scalar("bool()"))

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self._scalar("an index"))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self._host("np.asarray()")
        return a if dtype is None else a.astype(dtype)

    def __jax_array__(self) -> jax.Array:
        return read(self)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return read(self).__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return peek(self).__dlpack_device__()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        if isinstance(self._data, jax.core.Tracer) or not isinstance(self._data, jax.Array):
            return f"Tensor(<traced>, shape={self.shape}, dtype={self.dtype})"
        a = np.asarray(self._data)
        rows = a if self._len is None else a[:_ragged.host_length(self)]
        body = np.array2string(rows, separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype}, device={self.device})"

    __hash__ = object.__hash__

    def _holds(self, array: Any) -> bool:
        """Whether this tensor holds `array` now: a holder in another tensor's record
        (`eager.core.ownership`)."""
        return ownership.same_buffer(self._data, array)

    # ----- conversions ----------------------------------------------------------------------
    def detach(self) -> Tensor:
        """A tensor with the same value and no gradient history."""
        h = _current()
        out = _wrap_from(self, self._data if h is None else h.untracked(h.read(self)))
        out._len = self._len  # a ragged tensor stays ragged: the same storage and length
        if self._qdtype is not None:
            out._qdtype = self._qdtype
        return out

    def __deepcopy__(self, memo: dict) -> Tensor:
        """`copy.deepcopy`: a tensor of this one's class (a Parameter stays one) holding its value,
        without gradient history, `.grad` or user attributes, as in MegEngine. Python's default
        would copy the tape nodes behind it, and inside a traced region keep the dependence on
        what it was computed from that the copy cuts (the zoo's spectral norm relies on it)."""
        out = self.detach()
        if type(self) is not Tensor:
            out.__class__ = type(self)  # Parameter: Tensor's slots, nothing more
        if (qparams := self.__dict__.get("_qparams")) is not None:  # kept, as MegEngine does
            out.__dict__["_qparams"] = copy.deepcopy(qparams, memo)
        return out

    def __copy__(self) -> Tensor:
        """`copy.copy`: a tensor of this one's class sharing its array, history and attributes."""
        out = type(self).__new__(type(self))
        state = self.__getstate__()
        out.__setstate__(state)
        if _current() is None:
            ownership.share(out, self)
        return out

    def __getstate__(self) -> Any:  # pickles without the ownership record (weak references)
        attrs, slots = super().__getstate__()  # type: ignore[misc]
        return attrs, {k: v for k, v in slots.items() if k != "_holders"}

    def __setstate__(self, state: Any) -> None:
        attrs, slots = state
        for k, v in {**(attrs or {}), **slots}.items():
            object.__setattr__(self, k, v)
        self._holders = None

    def astype(self, dtype: DTypeLike) -> Tensor:
        if self._qdtype is not None or getattr(dtype, "metadata", None):
            return above.quantized_astype(self, dtype)  # quantize, dequantize or requantize
        return apply(OPS["astype"], self, dtype=_checked_dtype(dtype))

    def _to_device(self, device: Any) -> Tensor:
        """A copy on `device` (a name like "gpu0"), without gradient history; see `to`."""
        return _wrap_from(self, jax.device_put(peek(self), _device.parse(device)))

    # ----- for the methods of tensor_methods.py, which cannot import this module ------------
    def _op(self, name: str, *inputs: Any, **attrs: Any) -> Tensor:
        return apply(OPS[name], self, *inputs, **attrs)

    def _assign(self, new: Tensor) -> None:
        rebind(self, new, new._node, new._out_idx)
        self._len = new._len
        if new._qdtype is not None or self._qdtype is not None:  # the value's dtype, as MegEngine
            self._qdtype = new._qdtype

    def set_value(self, value: Any) -> None:
        """Replace this tensor's value, shape and dtype included, by `value`'s (MegEngine's
        deprecated `set_value`; `t[...] = value` keeps the shape and dtype and is what new code
        writes). As in MegEngine, the tensor takes `value`'s gradient history too: under a
        recording GradManager, gradients through it reach what `value` was computed from
        (`value.detach()` or `copy.deepcopy(value)` cuts it)."""
        self._assign(value if isinstance(value, Tensor) else Tensor(value))

    def _reset(self, other: Any) -> None:
        """Make this tensor hold `other` (MegEngine's `_reset`, what its `set_value` calls):
        a Tensor as it is, shape, dtype and gradient history included; anything else
        converted to this tensor's dtype. Everything holding this tensor sees the change."""
        if not isinstance(other, Tensor):
            other = Tensor(other, dtype=self.dtype)
        self._assign(other)

    def reset_zero(self) -> None:
        """Multiply this tensor by zero in place (MegEngine's `reset_zero`, deprecated there
        for `t *= 0`; a NaN stays NaN, as there)."""
        self._assign(apply(_MUL, self, 0))

    # ----- shape ----------------------------------------------------------------------------
    def reshape(self, *shape: SupportsIndex | Sequence[SupportsIndex]) -> Tensor:
        return apply(OPS["reshape"], self, shape=shape_arg(shape))

    def transpose(self, *axes: Any) -> Tensor:
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        new = [i for i, a in enumerate(axes) if isinstance(a, str) and a == "x"]
        if new:  # MegEngine's "x": a new axis of length 1 at that place of the result
            moved = self.transpose(*[a for a in axes if not (isinstance(a, str) and a == "x")])
            return apply(OPS["expand_dims"], moved, axis=tuple(new))
        axes = shape_arg(axes) or tuple(reversed(range(self.ndim)))
        return apply(OPS["transpose"], self, axes=axes)

    # ----- reductions -----------------------------------------------------------------------
    def sum(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["sum"], self, axis=axis_arg(axis), keepdims=keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["mean"], self, axis=axis_arg(axis), keepdims=keepdims)

    def var(self, axis: Axis = None, keepdims: bool = False, unbiased: bool = False) -> Tensor:
        """Variance over `axis`, as `F.var`: the population statistic unless `unbiased`
        (PyTorch's `Tensor.var` defaults to the unbiased one)."""
        return apply(OPS["var"], self, axis=axis_arg(axis), keepdims=keepdims,
                     ddof=int(unbiased))

    def max(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["max"], self, axis=axis_arg(axis), keepdims=keepdims)

    def min(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["min"], self, axis=axis_arg(axis), keepdims=keepdims)

    def prod(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["prod"], self, axis=axis_arg(axis), keepdims=keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["argmax"], self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return apply(OPS["argmin"], self, axis=axis, keepdims=keepdims)

    # ----- operators ------------------------------------------------------------------------
    def __add__(self, o: Any) -> Tensor: return apply(_ADD, self, o)  # noqa: E704
    def __radd__(self, o: Any) -> Tensor: return apply(_ADD, o, self)  # noqa: E704
    def __sub__(self, o: Any) -> Tensor: return apply(_SUB, self, o)  # noqa: E704
    def __rsub__(self, o: Any) -> Tensor: return apply(_SUB, o, self)  # noqa: E704
    def __mul__(self, o: Any) -> Tensor: return apply(_MUL, self, o)  # noqa: E704
    def __rmul__(self, o: Any) -> Tensor: return apply(_MUL, o, self)  # noqa: E704
    def __truediv__(self, o: Any) -> Tensor: return apply(_DIV, self, o)  # noqa: E704
    def __rtruediv__(self, o: Any) -> Tensor: return apply(_DIV, o, self)  # noqa: E704
    def __floordiv__(self, o: Any) -> Tensor: return apply(OPS["floor_div"], self, o)  # noqa: E704
    def __rfloordiv__(self, o: Any) -> Tensor: return apply(OPS["floor_div"], o, self)  # noqa: E704
    def __mod__(self, o: Any) -> Tensor: return apply(OPS["mod"], self, o)  # noqa: E704
    def __rmod__(self, o: Any) -> Tensor: return apply(OPS["mod"], o, self)  # noqa: E704
    def __pow__(self, o: Any) -> Tensor: return apply(OPS["pow"], self, o)  # noqa: E704
    def __rpow__(self, o: Any) -> Tensor: return apply(OPS["pow"], o, self)  # noqa: E704
    def __matmul__(self, o: Any) -> Tensor: return apply(OPS["matmul"], self, o)  # noqa: E704
    def __rmatmul__(self, o: Any) -> Tensor: return apply(OPS["matmul"], o, self)  # noqa: E704
    def __neg__(self) -> Tensor: return apply(OPS["neg"], self)  # noqa: E704
    def __pos__(self) -> Tensor: return self  # noqa: E704
    def __abs__(self) -> Tensor: return apply(OPS["abs"], self)  # noqa: E704
    def abs(self) -> Tensor: return apply(OPS["abs"], self)  # noqa: E704
    def __invert__(self) -> Tensor: return apply(OPS["bitwise_not"], self)  # noqa: E704
    def __and__(self, o: Any) -> Tensor: return apply(OPS["bitwise_and"], self, o)  # noqa: E704
    def __rand__(self, o: Any) -> Tensor: return apply(OPS["bitwise_and"], o, self)  # noqa: E704
    def __or__(self, o: Any) -> Tensor: return apply(OPS["bitwise_or"], self, o)  # noqa: E704
    def __ror__(self, o: Any) -> Tensor: return apply(OPS["bitwise_or"], o, self)  # noqa: E704
    def __xor__(self, o: Any) -> Tensor: return apply(OPS["bitwise_xor"], self, o)  # noqa: E704
    def __rxor__(self, o: Any) -> Tensor: return apply(OPS["bitwise_xor"], o, self)  # noqa: E704
    # elementwise, as in numpy and jax: a bool Tensor, where object's `==` promises a bool
    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return apply(OPS["equal"], self, o)

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return apply(OPS["not_equal"], self, o)

    def __lt__(self, o: Any) -> Tensor: return apply(OPS["less"], self, o)  # noqa: E704
    def __le__(self, o: Any) -> Tensor: return apply(OPS["less_equal"], self, o)  # noqa: E704
    def __gt__(self, o: Any) -> Tensor: return apply(OPS["greater"], self, o)  # noqa: E704
    def __ge__(self, o: Any) -> Tensor: return apply(OPS["greater_equal"], self, o)  # noqa: E704

    # ----- indexing -------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Tensor:
        spec, dynamic = above.parse_index(self, index)
        return apply(OPS["getitem"], self, *dynamic, spec=spec)

    def __setitem__(self, index: Any, value: Any) -> None:
        new = above.mask_assigned(self, index, value)  # `x[mask] = v`: a select, if it is one
        if new is None:
            spec, dynamic = above.parse_index(self, index)
            new = apply(OPS["setitem"], self, value, *dynamic, spec=spec)
        self._assign(new)


class Parameter(Tensor):
    """A Tensor that a Module registers as a trainable parameter."""

    __slots__ = ()
    _grads_by_default = True  # `requires_grad` until frozen


_ADD, _SUB, _MUL, _DIV = OPS["add"], OPS["sub"], OPS["mul"], OPS["div"]


# ----- what the modules above supply -------------------------------------------------------------
class _Above:
    """What the Tensor reaches in the two modules above this one, which make Tensors and run
    ops and so import this module: `indexing.py` parses `t[index]` (`parse_index`), makes
    `t[mask] = v` a select where it is one (`mask_assigned`), and
    `ragged_dispatch.py` runs ops with a ragged input (`dispatch_ragged`) and reads a ragged
    tensor's exact array (`exact_array`), `quantized_tensors.py` makes and runs ops on
    quantized tensors. Each sets its functions here when it is imported; `eager/core/__init__.py`
    imports them, so they are set before any Tensor exists."""

    parse_index: Callable[[Any, Any], tuple[tuple, list]]
    mask_assigned: Callable[[Any, Any, Any], Any]
    quantized_init: Callable[[Any, Any], tuple[Any, Any, np.dtype]]
    quantized_astype: Callable[[Tensor, Any], Tensor]
    dispatch_quantized: Callable[[Op, dict, Sequence], Any]
    dispatch_ragged: Callable[[Op, tuple, Sequence], Any]
    exact_array: Callable[[Any], Any]


above = _Above()
#: whether a quantized tensor was ever made: until then `apply` looks for none
#: (quantized_tensors.py)
QUANTIZED = [False]


# ----- storage: the one read accessor, the one rebind -------------------------------------------
def read(t: Tensor) -> Any:
    """The array behind `t`, as an op sees it (a tracer during capture); for a ragged tensor,
    its exact (logical) array. The array is handed out: later optimizer updates and `xla_trace`
    steps copy it rather than donate it (see `eager.core.ownership`)."""
    if t._len is not None:
        return above.exact_array(t)
    h = _current()
    if h is not None:
        return h.read(t)
    ownership.hand_out(t)
    return t._data


def peek(t: Tensor) -> Any:
    """`read(t)` for framework code that passes the array on and keeps no reference to it, so
    that `t`'s buffer may still be donated later."""
    if t._len is not None:
        return above.exact_array(t)
    h = _current()
    return t._data if h is None else h.read(t)


def rebind(t: Tensor, value: Any, node: Any = None, out_idx: int = 0, *,
           relayout: bool = False) -> None:
    """Replace `t`'s storage with `value` (and its grad history with `node`): `x[i] = v`,
    optimizer updates, BatchNorm statistics, RNG state and loading all go through here.
    A ragged tensor stays ragged: `value` is storage of the same shape.

    `value` is an array, or a Tensor whose storage `t` then shares. An array the caller passes
    may still be held by the caller, so `t`'s buffer is copied rather than donated until `t`
    holds an op's result again; a Tensor (a result the caller drops) keeps donation possible.

    A tensor laid out over a mesh keeps its layout: a value of the same shape that lies
    otherwise is moved there (an update computed from a sharded gradient leaves a replicated
    parameter replicated). `relayout=True` takes `value`'s layout instead, as
    `dist.replicate` and `dist.shard_params` do."""
    source = value if isinstance(value, Tensor) else None
    if source is not None:
        value = source._data
    if (h := _current()) is not None:
        h.rebind(t, value)  # (first: a capture saves t's record as it was)
    else:
        old = t._data
        if not relayout:  # (moved to t's layout, maybe over the same buffer)
            value = _device.keep_layout(old, value)
        if source is None and value is not old:  # the caller's array: it may keep it
            ownership.fresh(t)
            ownership.hand_out(t)
    if source is not None:  # also while recording lazily, where arrays are real
        ownership.share(t, source)
    t._data, t._node, t._out_idx = value, node, out_idx


def _wrap(array: Any) -> Tensor:
    """A Tensor holding `array` as it is: no copy, no device move, no gradient history."""
    t = Tensor.__new__(Tensor)
    t._data, t._node, t._out_idx, t._tracked, t._grad, t._len = array, None, 0, 0, None, None
    t._holders = None
    if (h := _current()) is not None:
        h.created(t)
    return t


def made(array: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """`Tensor(array, dtype, device)` for an array the caller just made and keeps no other
    reference to: the tensor is its only holder (`eager.core.ownership`), as an op's result is."""
    t = Tensor(array, dtype, device)
    ownership.fresh(t)
    return t


def _wrap_from(source: Tensor, array: Any = None) -> Tensor:
    """`_wrap(array)` for an array made from `source` (by default `peek(source)`), maybe over
    `source`'s own buffer: the two tensors are in one record (`eager.core.ownership`)."""
    out = _wrap(peek(source) if array is None else array)
    ownership.share(out, source)  # (in a capture too: holders are checked by buffer)
    return out


def constant(make: Callable[[], Any]) -> Any:
    """`make()`: the array of a tensor made from values that depend on no tensor (`eg.zeros`,
    `eg.tensor([...])`). Inside a capture it is a tracer, and the capture remembers how to make
    it again (a region that breaks hands it over as a constant)."""
    h = _current()
    return make() if h is None else h.constant(make)


def to_array(data: Any, dtype: Any = None, device: Any = None) -> Any:
    """The jax array for Tensor construction data: Python numbers and lists default to float32 /
    int32; numpy arrays keep their dtype (as jax canonicalizes it); jax arrays are not copied.
    The result is committed to a device (the default one unless `device` or the data say)."""
    if isinstance(data, Tensor):
        arr = peek(data)
    elif isinstance(data, (jax.Array, jax.core.Tracer)):
        arr = data
    else:
        host = _host_array(data)
        # not jnp.asarray where no capture traces: it stages the value through an identity
        # program, compiled once per new shape (jax.lax.stage); device_put compiles nothing
        arr = constant(lambda: jax.device_put(host) if _current() is None else jnp.asarray(host))
    if dtype is not None and np.dtype(dtype) != arr.dtype:
        arr = arr.astype(np.dtype(dtype))
    dev = _device.parse(device) or _device.default()
    if dev is not None and not isinstance(arr, jax.core.Tracer):
        return jax.device_put(arr, dev)
    return _device.commit(arr)  # Note [committed arrays] in device.py


def _host_array(data: Any) -> np.ndarray:
    """`data` as numpy, Python numbers as float32 / int32; anything that is not numbers (a
    ragged list, a string, an arbitrary object) is an `OpTypeError` naming the user's line."""
    try:
        host = np.asarray(data)
    except (TypeError, ValueError) as e:  # numpy's "inhomogeneous shape" for a ragged list
        raise _bad_argument(f"tensor: cannot make a tensor from {data!r:.60} ({e}).",
                            OpTypeError) from None
    if host.dtype.kind in "OUSmM":  # objects, strings, dates (bfloat16 is kind "V": kept)
        raise _bad_argument(f"tensor: cannot make a tensor from {type(data).__name__} "
                            f"{data!r:.60}: a tensor holds numbers (or bools).", OpTypeError)
    if not isinstance(data, (np.ndarray, np.generic)):
        host = host.astype({"f": _FLOAT, "i": _INT, "u": _INT}.get(host.dtype.kind, host.dtype))
    return host


# ----- the dispatcher ---------------------------------------------------------------------------
def apply(op: Op, *inputs: Any, **attrs: Any) -> Any:
    """Run `op` on `inputs` (Tensors, Python scalars, arrays or None) with static `attrs`.

    Returns a Tensor, or a tuple of Tensors for multi-output ops. Arguments the op cannot take
    raise `OpArgumentError` / `OpTypeError` naming the op, the arguments and the user's line.
    """
    if QUANTIZED[0]:
        for x in inputs:
            if isinstance(x, Tensor) and x._qdtype is not None:
                return above.dispatch_quantized(op, attrs, inputs)
    if (low := _amp.state.get()) is not None:  # inside amp.autocast: cast by the op's rule
        inputs = _amp.cast_inputs(op, inputs, low, Tensor)
    key = tuple(attrs.items()) if attrs else ()
    try:  # free unless something raises: then jax's error becomes one that names the user's line
        if _profiling.ON and _current() is None:
            return _profiled(op, key, inputs)
        return _dispatch(op, key, inputs)
    except (TypeError, ValueError) as e:
        err = _translate(op, inputs, key, e)
        if err is e:
            raise
        raise err from err.__cause__  # jax's own error is not chained: its reason is quoted


def _profiled(op: Op, key: tuple, inputs: Sequence) -> Any:
    """`apply` inside `eager.profile()`: the op timed as eager forward, its results waited for
    (with the profile's `sync`)."""
    with _profiling.timed("eager forward", op.name) as outs:
        out = _dispatch(op, key, inputs)
        outs.extend(t._data for t in (out if isinstance(out, tuple) else (out,))
                    if isinstance(t, Tensor))
    return out


def _dispatch(op: Op, key: tuple, inputs: Sequence) -> Any:
    """`apply` after amp's casts: the ragged or the plain dispatch."""
    for x in inputs:
        if isinstance(x, Tensor) and x._len is not None:  # a ragged axis 0
            return above.dispatch_ragged(op, key, inputs)
    return run_op(op, key, inputs)


def run_op(op: Op, key: tuple, inputs: Sequence) -> Any:
    """`apply` after amp's casts, with `key` the static attributes as a tuple of (name, value):
    runs the op on each input's storage as it is (padded, for a ragged tensor)."""
    h = _current()
    if h is not None and h.defers:
        return h.defer(op, key, inputs)
    fn = op._fwd.get(key) or op.jitted(key)
    recording, paused = tape.state()
    record = op.differentiable and recording and not paused
    arrays = []
    mask: list[int] = []
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor):
            arrays.append(x._data if h is None else h.read(x))
            if record and (x._node is not None or x._tracked) and _diff(x._data.dtype):
                mask.append(i)
        else:  # a nested list is an array; None, scalars and arrays pass as they are
            arrays.append(jax.device_put(np.asarray(x)) if isinstance(x, (list, tuple)) else x)
    if op.donate is not None and h is None:
        _unshare(arrays, inputs, op.donated(key))
    out = fn(*arrays)
    if h is not None:
        return _apply_captured(h, op, key, inputs, arrays, out, mask)
    if _device.waits_for_spread_results():
        _device.settle(out)
    outs = tuple([_wrap(o) for o in out]) if op.multi_output else (_wrap(out),)
    if mask:
        _record(op, key, tuple(mask), inputs, arrays, outs)
    return outs if op.multi_output else outs[0]


def _apply_captured(h: Any, op: Op, key: tuple, inputs: Sequence, arrays: list, out: Any,
                    mask: list[int]) -> Any:
    """The end of `apply` while a capture is active: it may cut gradients of outputs that
    record none, and it sees every op call."""
    if not mask and op.differentiable:
        out = h.untracked(out) if not op.multi_output else tuple(h.untracked(o) for o in out)
    outs = tuple(_wrap(o) for o in out) if op.multi_output else (_wrap(out),)
    if mask:
        _record(op, key, tuple(mask), inputs, arrays, outs)
    h.applied(op, key, inputs, arrays, outs)
    return outs if op.multi_output else outs[0]


def _unshare(arrays: list, inputs: Sequence, donated: tuple[int, ...]) -> None:
    """Copy each array about to be donated that something else still holds (another Tensor, a
    raw array handed out, a recorded tape node: `eager.core.ownership`), or that came as a raw array
    rather than a Tensor, so that donation only consumes buffers nothing else will read."""
    for i in donated:
        x = inputs[i]
        if not (isinstance(x, Tensor) and x._len is None and ownership.sole(x)):
            arrays[i] = jnp.array(arrays[i], copy=True)


def _record(op: Op, key: tuple, mask: tuple, inputs: Sequence, arrays: list, outs: tuple) -> None:
    bwd = op.vjp(key, mask)
    primals = tuple(arrays)
    node = tape.Node(
        op.name,
        lambda cts: bwd(primals, tuple(cts)),
        [tape.parent_of(inputs[i]) for i in mask],
        [(o._data.shape, o._data.dtype) for o in outs],
        op=(op, key, mask, primals),
    )
    for i, o in enumerate(outs):
        if i not in op.nondiff_outputs and _diff(o._data.dtype):
            o._node, o._out_idx = node, i
    for x in inputs:  # the node keeps the input arrays (`primals`) until a backward frees it
        if isinstance(x, Tensor) and x._node is None:
            ownership.hold(x, node)
