"""Tensor methods in MegEngine's and PyTorch's spellings, kept out of tensors.py: views of the
shape (`view`, `permute`, `unsqueeze`, `squeeze`, `expand`, `flatten`), copies and conversions
(`clone`, `tolist`, the `float()`-style casts, `to`), in-place arithmetic (`x += y` and co.) and
the `requires_grad` flag.

`Tensor` inherits `TensorMethods`. This module imports nothing from `tensors.py` (which imports
it), so the methods reach the dispatcher through three small Tensor methods: `_op` (apply a
registry op to self), `_assign` (rebind self's storage and history, as `x[i] = v` does) and
`_to_device`.

>>> import eager as eg
>>> x = eg.tensor([[1.0, 2.0, 3.0]])
>>> x.unsqueeze(0).shape, x.permute(1, 0).shape, x.expand(2, -1).shape
((1, 1, 3), (3, 1), (2, 3))
>>> x += 1
>>> x.tolist()
[[2.0, 3.0, 4.0]]
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, SupportsIndex

import jax
import jax.numpy as jnp
import numpy as np

from . import device as _device
from . import tape
from .errors import OpArgumentError, OpIndexError, OpTypeError
from .op_errors import bad_argument

if TYPE_CHECKING:
    from numpy.typing import DTypeLike
    from typing_extensions import Self

    from .device import DeviceLike


def _ints(args: Sequence, what: str) -> tuple[int, ...]:
    """`f(2, 3)` and `f((2, 3))` alike, as integers."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    try:
        return tuple(operator.index(a) for a in args)
    except TypeError:
        raise bad_argument(f"{what} takes integers (or one tuple of them), got "
                           f"{tuple(args)!r:.80}", OpTypeError) from None


def _axis(axis: Any, ndim: int, what: str) -> int:
    """`axis` in [-ndim, ndim), made non-negative."""
    (a,) = _ints((axis,), what)
    if not -ndim <= a < ndim:
        raise bad_argument(f"{what}: axis {a} is out of range for a tensor with {ndim} axes "
                           f"(use -{ndim} to {ndim - 1})")
    return a % ndim


def _axes(axis: Any) -> Any:
    """None, an int or a tuple of ints, as a reduction's static `axis`."""
    if axis is None:
        return None
    return _ints((axis,), "axis")[0] if isinstance(axis, int) else _ints((axis,), "axis")


def _integral(o: Any) -> bool:
    """Whether `o` (a Python number, an array or a Tensor) holds integers (not booleans)."""
    if isinstance(o, bool):
        return False
    if isinstance(o, int):
        return True
    dtype = getattr(o, "dtype", None)
    return dtype is not None and _family(dtype) == "integer"


def _family(dtype: np.dtype) -> str:
    """The kind of number a dtype holds; an in-place update may narrow within it only."""
    for family, kind in (("bool", jnp.bool_), ("integer", jnp.integer),
                         ("floating", jnp.floating), ("complex", jnp.complexfloating)):
        if jnp.issubdtype(dtype, kind):
            return family
    return str(dtype)


def _dtype_or_none(x: Any) -> np.dtype | None:
    """`x` as a dtype, or None when it names something else (a device)."""
    if x is None or isinstance(x, (jax.Device, jax.sharding.Sharding)):
        return None
    try:
        return np.dtype(jax.dtypes.canonicalize_dtype(x))
    except TypeError:
        return None


def shape_arg(shape: Sequence) -> tuple:
    """A shape given as sizes, one sequence of sizes, or (MegEngine) a 1-d int Tensor or array,
    whose values are read."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    elif len(shape) == 1 and getattr(shape[0], "ndim", 0) == 1:
        shape = np.asarray(shape[0]).tolist()
    return tuple(int(s) for s in shape)


def axis_arg(axis: Any) -> Any:
    """An `axis=` argument as an op attribute: None, an int, or a tuple of ints."""
    if axis is None or isinstance(axis, int):
        return axis
    return tuple(int(a) for a in axis)


class TensorMethods:
    """The mixin: PyTorch-style methods over Tensor's own (see the module docstring)."""

    __slots__ = ("_requires_grad",)  # unset: the default of `requires_grad` below
    _grads_by_default = False  # Parameter sets it: a parameter requires grad until frozen
    _requires_grad: builtins.bool

    # Tensor's own members, which these methods (and index_checks.py, which holds a
    # TensorMethods for the same reason: it cannot import tensors.py) use
    if TYPE_CHECKING:
        _data: Any
        _node: tape.Node | None
        _tracked: builtins.int

        @property
        def shape(self) -> tuple[builtins.int, ...]: ...
        @property
        def ndim(self) -> builtins.int: ...
        @property
        def dtype(self) -> np.dtype: ...
        @property
        def device(self) -> str: ...
        def _op(self, name: str, *inputs: Any, **attrs: Any) -> Self: ...
        def _assign(self, new: Self) -> None: ...
        def _to_device(self, device: Any) -> Self: ...
        def _host(self, what: str) -> np.ndarray: ...
        def astype(self, dtype: DTypeLike) -> Self: ...
        def reshape(self, *shape: SupportsIndex | Sequence[SupportsIndex]) -> Self: ...
        def transpose(self, *axes: Any) -> Self: ...
        def detach(self) -> Self: ...

    # ----- shape ----------------------------------------------------------------------------
    def view(self, *shape: Any) -> Self:
        """`reshape` (a new array here: jax arrays are never views). One entry may be -1."""
        return self.reshape(*_ints(shape, "Tensor.view"))

    def permute(self, *axes: Any) -> Self:
        """The axes reordered: `axes` names every axis once (`transpose` with all axes)."""
        axes = _ints(axes, "Tensor.permute")
        if sorted(a % self.ndim if -self.ndim <= a < self.ndim else -1 for a in axes) != list(
                range(self.ndim)):
            raise bad_argument(
                f"Tensor.permute{axes}: a tensor of shape {self.shape} needs each of its "
                f"{self.ndim} axes named once, e.g. permute{tuple(reversed(range(self.ndim)))}")
        return self.transpose(*axes)

    def unsqueeze(self, axis: int) -> Self:
        """A length-1 axis inserted at `axis` (negative counts from the end of the result)."""
        return self._op("expand_dims", axis=(_axis(axis, self.ndim + 1, "Tensor.unsqueeze"),))

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Self:
        """Length-1 axes removed: all of them, or those in `axis` (which must have length 1,
        as in MegEngine; PyTorch skips others silently)."""
        if axis is None:
            return self._op("squeeze", axis=None)
        axes = tuple(_axis(a, self.ndim, "Tensor.squeeze")
                     for a in ((axis,) if not isinstance(axis, (tuple, list)) else axis))
        if any(self.shape[a] != 1 for a in axes):
            raise bad_argument(
                f"Tensor.squeeze(axis={axis!r}): a tensor of shape {self.shape} has axes of "
                "length other than 1 there; squeeze only removes length-1 axes")
        return self._op("squeeze", axis=tuple(sorted(set(axes))))

    def expand(self, *shape: Any) -> Self:
        """Broadcast to `shape` (PyTorch's `expand`): -1 keeps an axis as it is; new axes go
        in front. The same as `F.broadcast_to` otherwise."""
        shape = _ints(shape, "Tensor.expand")
        new = len(shape) - self.ndim
        if new < 0 or any(s == -1 for s in shape[:new]) or any(s < -1 for s in shape):
            raise bad_argument(
                f"Tensor.expand{shape}: a tensor of shape {self.shape} expands to at least "
                f"{self.ndim} axes, each >= 0 or -1 (keep that axis), -1 not on new axes")
        target = tuple(self.shape[i - new] if s == -1 else s for i, s in enumerate(shape))
        return self._op("broadcast_to", shape=target)

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Self:
        """Axes `start_axis`..`end_axis` merged into one."""
        if not self.ndim:
            return self.reshape(1)
        n = self.ndim
        for name, axis in (("start_axis", start_axis), ("end_axis", end_axis)):
            if not -n <= axis < n:
                raise OpIndexError(f"flatten: {name}={axis} is out of range for a {n}-d tensor "
                                   f"of shape {self.shape}; it must lie in [{-n}, {n - 1}].")
        s, e = start_axis % n, end_axis % n
        if s > e:
            raise OpArgumentError(f"flatten: start_axis={start_axis} comes after end_axis="
                                  f"{end_axis} for a {n}-d tensor of shape {self.shape}.")
        return self.reshape(*self.shape[:s], -1, *self.shape[e + 1:])

    @property
    def T(self) -> Self:  # noqa: N802  (numpy's and PyTorch's name)
        return self.transpose()

    # ----- copies and conversions -----------------------------------------------------------
    def clone(self) -> Self:
        """A copy with its own storage that keeps the gradient history (unlike `detach`)."""
        return self._op("reshape", shape=self.shape)  # an identity op: a fresh array

    def any(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Self:
        """Whether any element is nonzero (along `axis`): a bool tensor, as in PyTorch; use
        `bool(x.any())` for a Python bool (a value read)."""
        return self._op("any", axis=_axes(axis), keepdims=bool(keepdims))

    def all(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Self:
        """Whether every element is nonzero (along `axis`): a bool tensor."""
        return self._op("all", axis=_axes(axis), keepdims=bool(keepdims))

    def tolist(self) -> Any:
        """The value as nested Python lists (a Python number for a 0-d tensor): a host read."""
        return self._host(".tolist()").tolist()

    def to(self, *args: Any, dtype: DTypeLike | None = None, device: DeviceLike = None
           ) -> Self:
        """A copy with another dtype and/or on another device: `to("gpu0")`, `to("float16")`,
        `to(other_tensor)` (its dtype and device), or keywords. Always a new tensor (as
        MegEngine's `to`); a cast keeps the gradient history, a move across devices has none."""
        for a in args:
            if isinstance(a, TensorMethods):
                dtype, device = a.dtype, a.device
            elif (d := _dtype_or_none(a)) is not None:
                dtype = d
            else:
                device = a
        cast = None if dtype is None else self.astype(dtype)
        target = _device.parse(device)
        if target is not None and _device.parse(self.device) != target:
            if (self._node is not None or self._tracked) and tape.is_recording():
                raise bad_argument(
                    f"Tensor.to({device!r}) moves a tensor that a GradManager records across "
                    "devices, which carries no gradient; move it before recording (or "
                    "detach() it)")
            return (self if cast is None else cast)._to_device(target)
        return self.clone() if cast is None else cast

    def float(self) -> Self:
        """A float32 copy (PyTorch's `t.float()`; the builtin `float(t)` gives a number)."""
        return self.astype(np.float32)

    def half(self) -> Self:
        """A float16 copy."""
        return self.astype(np.float16)

    def bfloat16(self) -> Self:
        """A bfloat16 copy."""
        return self.astype(jnp.bfloat16)

    def double(self) -> Self:
        """A float64 copy where jax has 64-bit types enabled, float32 otherwise."""
        return self.astype(jax.dtypes.canonicalize_dtype(np.float64))

    def int(self) -> Self:
        """An int32 copy (the builtin `int(t)` gives a number)."""
        return self.astype(np.int32)

    def long(self) -> Self:
        """An int64 copy where jax has 64-bit types enabled, int32 otherwise."""
        return self.astype(jax.dtypes.canonicalize_dtype(np.int64))

    def bool(self) -> Self:
        """A bool copy (the builtin `bool(t)` gives the truth value of a one-element tensor)."""
        return self.astype(np.bool_)

    # ----- in-place arithmetic --------------------------------------------------------------
    # `x += y` rebinds x's storage to `x + y` through `rebind`, as `x[i] = v` does, so autodiff
    # (x now has the sum's history) and captures see it. x keeps its shape and its dtype (a
    # result of a wider kind, int += float, is refused as in PyTorch).
    def _inplace(self, new: Any, symbol: str) -> Self:
        if new.shape != self.shape:
            raise bad_argument(
                f"`x {symbol} y` with x of shape {self.shape}: the result has shape {new.shape}, "
                f"but an in-place update keeps x's shape; write `x = x {symbol[:-1]} y` for a "
                "new tensor")
        if new.dtype != self.dtype:
            if _family(new.dtype) != _family(self.dtype):
                raise bad_argument(
                    f"`x {symbol} y` with x of dtype {self.dtype}: the result is {new.dtype}, "
                    f"which an in-place update cannot store in x; write `x = x {symbol[:-1]} y` "
                    f"(a new {new.dtype} tensor) or cast y first", OpTypeError)
            new = new.astype(self.dtype)
        self._assign(new)
        return self

    def __iadd__(self, o): return self._inplace(self + o, "+=")  # noqa: E704
    def __isub__(self, o): return self._inplace(self - o, "-=")  # noqa: E704
    def __imul__(self, o): return self._inplace(self * o, "*=")  # noqa: E704
    def __itruediv__(self, o): return self._inplace(self / o, "/=")  # noqa: E704
    def __ifloordiv__(self, o): return self._inplace(self // o, "//=")  # noqa: E704
    def __imod__(self, o): return self._inplace(self % o, "%=")  # noqa: E704
    def __ipow__(self, o):
        # an integer x keeps its dtype, as every in-place update does: the power in integers
        # (PyTorch's), where `x ** y` is MegEngine's float32
        if _family(self.dtype) == "integer" and _integral(o):
            if isinstance(o, int) and o < 0:
                raise bad_argument(f"`x **= {o}` with x of dtype {self.dtype}: a negative power "
                                   "of an integer is a fraction, which x cannot hold; write "
                                   f"`x = x ** {o}` (a float32 tensor)", OpTypeError)
            return self._inplace(self._op("int_pow", o), "**=")
        return self._inplace(self ** o, "**=")

    def __iand__(self, o): return self._inplace(self & o, "&=")  # noqa: E704
    def __ior__(self, o): return self._inplace(self | o, "|=")  # noqa: E704
    def __ixor__(self, o): return self._inplace(self ^ o, "^=")  # noqa: E704

    # ----- gradients ------------------------------------------------------------------------
    @property
    def requires_grad(self) -> builtins.bool:
        """Whether gradients reach this tensor: False once set so (a frozen tensor, which a
        GradManager skips); otherwise True for a Parameter, a tensor with gradient history,
        or one a recording GradManager tracks. Set it to freeze or unfreeze a leaf. Unlike
        PyTorch, `True` alone computes nothing: gradients come from `GradManager.attach`."""
        flag = getattr(self, "_requires_grad", None)
        if flag is not None:
            return flag
        return tape.differentiable(self.dtype) and (
            self._grads_by_default or self._node is not None or self._tracked > 0)

    @requires_grad.setter
    def requires_grad(self, flag: builtins.bool) -> None:
        flag = bool(flag)
        if flag and not tape.differentiable(self.dtype):
            raise bad_argument(f"requires_grad = True on a {self.dtype} tensor: only floating "
                               "tensors have gradients; cast it first (t.astype('float32'))",
                               OpTypeError)
        if not flag and self._node is not None:
            raise bad_argument(
                "requires_grad = False on a tensor computed from others (it has gradient "
                "history): only a leaf can be frozen; use t.detach() or t.detach_() instead")
        self._requires_grad = flag
        tape.flags_changed()  # compiled steps that differentiate it re-check

    def requires_grad_(self, flag: builtins.bool = True) -> Self:
        """Set `requires_grad` and return self (PyTorch's spelling)."""
        self.requires_grad = flag
        return self

    def detach_(self) -> Self:
        """Cut the gradient history in place: self becomes a leaf holding the same value."""
        self._assign(self.detach())
        return self
