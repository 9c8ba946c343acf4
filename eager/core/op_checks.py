"""Specific explanations of bad arguments for the ops where jax's own reason would confuse.

Each checker takes an op's inputs and static attributes and returns `(error class, text)` for the
first problem it finds, or None. The dispatcher asks after an op failed (no cost on success);
a functional wrapper asks before the call where jax would accept a wrong argument silently
(`op_errors.require`, e.g. an integer tensor given to a convolution).

>>> import numpy as np
>>> explain("reshape", (np.ones((3, 7)),), {"shape": (4, 5)})[1].split(";")[0]
'cannot reshape a tensor of shape (3, 7) (21 elements) into (4, 5) (20 elements)'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from .errors import OpArgumentError, OpTypeError
from .ops import OPS

Found = tuple[type, str] | None
_CHECKS: dict[str, Callable[[Sequence, dict], Found]] = {}
_BFLOAT16 = np.dtype(jax.numpy.bfloat16)


def explain(op_name: str, inputs: Sequence, attrs: dict) -> Found:
    """The problem a specific check finds with `inputs` of op `op_name`, or None."""
    check = _CHECKS.get(op_name)
    if check is None:
        return None
    try:
        return check(inputs, attrs)
    except Exception:  # noqa: BLE001  (arguments too odd to explain: the generic message says it)
        return None


def _checks(*names: str) -> Callable:
    def register(fn: Callable[[Sequence, dict], Found]) -> Callable:
        for name in names:
            _CHECKS[name] = fn
        return fn

    return register


def _shape(x: Any) -> tuple | None:
    """The shape of a tensor, array, nested list or number; None for anything else."""
    shape = getattr(x, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(x, (bool, int, float, complex, list, tuple)):
        return np.shape(x)
    return None


def _dims(x: Any) -> tuple:
    """`_shape(x)` where a shape is expected (`_missing` ruled None out): one that is not fails
    the check, which `explain` turns into None."""
    shape = _shape(x)
    assert shape is not None, x
    return shape


def _kind(x: Any) -> str:
    """numpy's kind of `x`'s dtype ("f" for bfloat16 too, whose numpy kind is "V")."""
    if not hasattr(x, "dtype"):
        return ""
    dtype = np.dtype(x.dtype)
    return "f" if dtype == _BFLOAT16 else dtype.kind


def _missing(inputs: Sequence, names: Sequence[str]) -> Found:
    """A required tensor argument that is None or has no shape."""
    for i, (x, what) in enumerate(zip(inputs, names)):
        if x is None:
            return OpTypeError, f"argument {i + 1} ({what}) is None, where a tensor is needed."
        if _shape(x) is None:
            return OpTypeError, (f"argument {i + 1} ({what}) is a {type(x).__name__}, where a "
                                 "tensor is needed.")
    return None


def _float_only(x: Any, what: str) -> Found:
    if _kind(x) not in ("f", "c", ""):
        return OpTypeError, (f"the {what} has dtype {np.dtype(x.dtype)}; this op needs float "
                             f"tensors: convert it with .astype('float32').")
    return None


@_checks("matmul")
def _matmul(inputs: Sequence, attrs: dict) -> Found:
    if (found := _missing(inputs, ("left operand", "right operand"))) is not None:
        return found
    a, b = (_dims(x) for x in inputs)
    for i, s in enumerate((a, b)):
        if len(s) == 0:
            return OpArgumentError, (f"argument {i + 1} is 0-d (a scalar); matmul needs tensors "
                                     "of at least one dimension: use `*` to scale by a scalar.")
    inner_a, inner_b = a[-1], b[-2] if len(b) > 1 else b[0]
    if inner_a != inner_b:
        return OpArgumentError, (
            f"the inner dimensions do not match: {a} @ {b} needs {inner_a} == {inner_b}. "
            "Transpose an operand (x.T) or check which axis holds the features.")
    batch_a, batch_b = a[:-2], b[:-2]
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        return OpArgumentError, (f"the batch dimensions {batch_a} and {batch_b} of {a} @ {b} do "
                                 "not broadcast; make them equal or 1.")
    return None


@_checks("linear")
def _linear(inputs: Sequence, attrs: dict) -> Found:
    x, weight, bias = inputs
    if (found := _missing((x, weight), ("input", "weight"))) is not None:
        return found
    xs, ws = _dims(x), _dims(weight)
    if len(ws) != 2:
        return OpArgumentError, (f"the weight has shape {ws}; it must be 2-d, (out_features, "
                                 "in_features).")
    if len(xs) == 0 or xs[-1] != ws[1]:
        return OpArgumentError, (
            f"the input of shape {xs} has {xs[-1] if xs else 0} features on its last axis but "
            f"the weight of shape {ws} (out_features, in_features) expects {ws[1]}. Give the "
            f"input {ws[1]} features or build the layer with in_features={xs[-1] if xs else 0}.")
    bs = _shape(bias)
    if bs is not None and bs not in ((ws[0],), ()):
        return OpArgumentError, (f"the bias has shape {bs}; for a weight of shape {ws} it must "
                                 f"be ({ws[0]},).")
    return None


@_checks("conv")
def _conv(inputs: Sequence, attrs: dict) -> Found:
    x, weight, bias = inputs
    n = len(attrs.get("stride", (1, 1)))
    if (found := _conv_kinds(x, weight, n)) is not None:
        return found
    xs, ws = _dims(x), _dims(weight)
    groups = attrs.get("groups", 1)
    if groups < 1 or ws[0] % groups:
        return OpArgumentError, (f"groups={groups} must be >= 1 and divide the {ws[0]} output "
                                 f"channels of the weight {ws}.")
    if xs[1] != ws[1] * groups:
        return OpArgumentError, (
            f"the input of shape {xs} has {xs[1]} channels but the weight of shape {ws} with "
            f"groups={groups} expects {ws[1] * groups} (weight.shape[1] * groups). Give the "
            "input that many channels or build the layer with the input's channel count.")
    if (found := _window(attrs, ("stride", "dilation"))) is not None:
        return found
    bs = _shape(bias)
    if bs is not None and math.prod(bs) != ws[0]:
        return OpArgumentError, (f"the bias has shape {bs}; it needs one value per output "
                                 f"channel ({ws[0]}).")
    return None


@_checks("conv_transpose")
def _conv_transpose(inputs: Sequence, attrs: dict) -> Found:
    x, weight, _ = inputs
    if (found := _conv_kinds(x, weight, len(attrs.get("stride", (1, 1))))) is not None:
        return found
    if (found := _window(attrs, ("stride", "dilation"))) is not None:
        return found
    xs, ws = _dims(x), _dims(weight)
    if xs[1] != ws[0]:
        return OpArgumentError, (f"the input of shape {xs} has {xs[1]} channels but the weight "
                                 f"of shape {ws} (in, out / groups, kh, kw) expects {ws[0]}.")
    return None


@_checks("conv:before")
def _conv_before(inputs: Sequence, attrs: dict) -> Found:
    """What a convolution wrapper checks before the call: what jax would take silently (integer
    tensors), refuse only when compiling (a zero stride: too late inside a region) or obscurely
    (a wrong number of axes). Cheap: the rest is explained only if the call fails."""
    x, weight = inputs
    n = len(attrs["stride"])
    try:
        if (x.ndim == weight.ndim == n + 2 and _kind(x) in "fc" and _kind(weight) in "fc"
                and min(attrs["stride"] + attrs["dilation"]) >= 1 and min(attrs["padding"]) >= 0):
            return None
    except AttributeError:  # not tensors: say which
        pass
    return _conv_kinds(x, weight, n) or _window(attrs, ("stride", "dilation"))


def _conv_kinds(x: Any, weight: Any, n: int) -> Found:
    if (found := _missing((x, weight), ("input", "weight"))) is not None:
        return found
    xs, ws = _dims(x), _dims(weight)
    if len(xs) != n + 2:
        layout = "(N, C, H, W)" if n == 2 else "(N, C, L)"
        return OpTypeError, (f"the input has shape {xs}; it must be {n + 2}-d {layout}: "
                             "add a batch axis with x[None] / F.expand_dims(x, 0).")
    if len(ws) != n + 2:
        return OpTypeError, (f"the weight has shape {ws}; it must be {n + 2}-d, (out, "
                             f"in / groups, {', '.join('k' * n)}).")
    for value, what in ((x, "input"), (weight, "weight")):
        if (found := _float_only(value, what)) is not None:
            return found
    return None


@_checks("cross_entropy", "nll_loss")
def _class_loss(inputs: Sequence, attrs: dict) -> Found:
    pred, label = inputs
    if (found := _missing((pred, label), ("pred", "label"))) is not None:
        return found
    ps, ls = _dims(pred), _dims(label)
    axis = attrs.get("axis", 1)
    if not -len(ps) <= axis < len(ps):
        return OpArgumentError, f"axis={axis} is out of range for pred of shape {ps}."
    want = ps[:axis % len(ps)] + ps[axis % len(ps) + 1:]
    if ls != want:
        return OpArgumentError, (
            f"pred of shape {ps} and label of shape {ls} do not fit: with the classes on axis "
            f"{axis}, label must have shape {want} (one class index per sample).")
    if _kind(label) not in "iu":
        return OpTypeError, (f"label is a {np.dtype(label.dtype)} tensor; it must hold integer "
                             "class indices: convert it with .astype('int32').")
    return None


@_checks("reshape")
def _reshape(inputs: Sequence, attrs: dict) -> Found:
    xs, shape = _dims(inputs[0]), tuple(attrs.get("shape", ()))
    n, known = math.prod(xs), math.prod(s for s in shape if s != -1)
    if sum(s == -1 for s in shape) > 1 or any(s < -1 for s in shape):
        return OpArgumentError, (f"the shape {shape} may hold one -1 (to infer that axis) and "
                                 "otherwise sizes >= 0.")
    if (-1 in shape and (known == 0 or n % known)) or (-1 not in shape and known != n):
        return OpArgumentError, (
            f"cannot reshape a tensor of shape {xs} ({n} elements) into {shape} ({known} "
            "elements); the new shape must hold as many elements (use -1 for one axis to "
            "infer it).")
    return None


@_checks("setitem")
def _setitem(inputs: Sequence, attrs: dict) -> Found:
    x, value, *index = inputs
    try:  # the shape of the part assigned to: that of `x[index]`
        getitem = OPS["getitem"].jitted((("spec", attrs["spec"]),))
        target = jax.eval_shape(getitem, *(_abstract(a) for a in (x, *index))).shape
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    vs = _dims(value)
    try:
        if np.broadcast_shapes(vs, target) == target:
            return None
    except ValueError:
        pass
    return OpArgumentError, (f"cannot assign a value of shape {vs} to a part of shape {target} "
                             f"of a tensor of shape {_shape(x)}; the value must broadcast to "
                             f"{target}.")


def _abstract(x: Any) -> Any:
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        return x  # a Python number or None
    return jax.ShapeDtypeStruct(tuple(x.shape), np.dtype(x.dtype))


@_checks("max_pool2d", "avg_pool2d")
def _pool(inputs: Sequence, attrs: dict) -> Found:
    xs = _shape(inputs[0])
    if xs is None or len(xs) != 4:
        return OpArgumentError, (f"the input has shape {xs}; pooling needs a 4-d (N, C, H, W) "
                                 "tensor.")
    found = _window(attrs, ("kernel", "stride"))
    if found is None and "kernel" in attrs:
        pad = attrs.get("padding", (0, 0))
        if any(n + 2 * p < k for n, p, k in zip(xs[2:], pad, attrs["kernel"])):
            return OpArgumentError, (
                f"kernel={attrs['kernel']} is larger than the input's spatial size {xs[2:]} "
                f"plus padding={pad}: the output would be empty; use a smaller kernel or pad.")
    return found


def _window(attrs: dict, positive: Sequence[str]) -> Found:
    """Sliding-window attributes: those named in `positive` >= 1, padding >= 0."""
    for name in positive:
        if any(v < 1 for v in attrs.get(name, ())):
            return OpArgumentError, f"{name}={attrs[name]} must be >= 1."
    if any(p < 0 for p in attrs.get("padding", ())):
        return OpArgumentError, f"padding={attrs['padding']} must be >= 0."
    return None


@_checks("embedding")
def _embedding(inputs: Sequence, attrs: dict) -> Found:
    index, weight = inputs
    if (found := _missing((index, weight), ("index", "weight"))) is not None:
        return found
    if _kind(index) not in "iu":
        return OpTypeError, (f"the index is a {np.dtype(index.dtype)} tensor; embedding needs "
                             "integer indices: convert it with .astype('int32').")
    if len(_dims(weight)) != 2:
        return OpArgumentError, (f"the weight has shape {_shape(weight)}; it must be 2-d "
                                 "(num_embeddings, dim).")
    return None
