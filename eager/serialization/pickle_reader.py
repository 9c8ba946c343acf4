"""A restricted unpickler: files written by `megengine.save` (and the pickles inside PyTorch's
checkpoints, see `torch_reader`) read as data, never as code.

Note [foreign files are data]: a pickle names globals and calls them, so unpickling a file from
elsewhere runs whatever it names. `RestrictedUnpickler.find_class` admits only the exact
globals such files use to rebuild numpy arrays, dtypes and scalars, MegEngine Tensors and
Parameters and plain containers, and maps each to a stand-in defined here that checks its
arguments; nothing the file names is imported, and any other global raises `CheckpointError`
before anything is called. Stand-ins are replaced by numpy arrays and Tensors in one bounded
pass over the result (`finish`).
"""

from __future__ import annotations

import _compat_pickle
import io
import math
import pickle
import reprlib
from collections import OrderedDict
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..core.errors import CheckpointError, OpArgumentError
from ..core.quant_dtype import BUILTIN_QUANT_DTYPES, create_quantized_dtype
from ..core.tensors import Parameter, Tensor
from .checkpoint_format import DTYPES, MAX_DEPTH

_MAX_NDIM = 64
_REFUSED = (
    "refuses the global {name} named in the file: eg.load rebuilds only numpy arrays, "
    "MegEngine and PyTorch tensors, numbers, strings and plain containers from a pickle, and "
    "never imports or calls anything else a file names (a pickle can name any function, "
    "os.system included). If you trust the file, load it with the framework that wrote it and "
    "save its state dict again: `mge.save(net.state_dict(), path)`, "
    "`torch.save(model.state_dict(), path)`, or as safetensors")


def is_pickle(head: bytes) -> bool:
    """Whether a file starting with `head` is a pickle of protocol 2 or later (what
    `megengine.save`, `pickle.dump` and PyTorch's legacy `torch.save` write)."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def refuse(what: str) -> CheckpointError:
    """The error for a file that holds something `eg.load` does not rebuild."""
    return CheckpointError(f"{what}; eg.load reads tensors, arrays, numbers, strings and plain "
                           "containers only")


class Stub:
    """A stand-in built while unpickling; `finish` replaces it by `value()`. A pickle may set
    the state only of those that define `__setstate__` again."""

    def __setstate__(self, state: Any) -> None:
        raise refuse(f"the pickle sets the state of a {type(self).__name__.lstrip('_')}")

    def value(self) -> Any:
        raise NotImplementedError


# ----- numpy ------------------------------------------------------------------------------------
class _Dtype(Stub):
    """`numpy.dtype(name, align, copy)`, then BUILD with numpy's state tuple: a plain numeric
    dtype from the checkpoint table with a byte order, nothing structured or object; metadata
    only as MegEngine's quantized dtypes carry it (`_quantized`)."""

    def __init__(self, name: Any, align: Any = False, copy: Any = True):
        try:
            dt = np.dtype(name) if isinstance(name, str) and len(name) <= 16 else None
        except (TypeError, ValueError):
            dt = None
        if dt is None or dt.fields is not None or dt.subdtype is not None \
                or dt.name not in DTYPES:
            raise refuse(f"the file holds an array of dtype {reprlib.repr(name)}")
        self.dtype = dt

    def __setstate__(self, state: Any) -> None:
        # numpy's state: (version, byte order, subarray, names, fields, elsize, alignment,
        # flags[, metadata])
        if not (isinstance(state, tuple) and len(state) in (8, 9)
                and state[1] in ("<", ">", "|", "=") and state[2:5] == (None, None, None)):
            raise refuse(f"malformed dtype state {reprlib.repr(state)}")
        if len(state) == 9 and state[8]:  # MegEngine's quantized dtypes: int8 weights' scale
            self.dtype = _quantized(self.dtype, state[8])
        if state[1] in "<>":
            self.dtype = self.dtype.newbyteorder(state[1])

    def value(self) -> np.dtype:
        return self.dtype.newbyteorder("=")  # numpy prints "<f4" for an explicit order


def _quantized(storage: np.dtype, metadata: Any) -> np.dtype:
    """`storage` as the quantized dtype that `metadata` describes: exactly MegEngine's
    `{"mgb_dtype": {"name", "scale"[, "zero_point"]}}` of a built-in quantized dtype stored so
    (what `megengine.save` writes for a quantized model's weights), rebuilt from checked values;
    any other metadata is refused."""
    info = metadata.get("mgb_dtype") if isinstance(metadata, dict) and len(metadata) == 1 \
        else None
    if not isinstance(info, dict):
        raise refuse(f"the file holds a dtype with metadata {reprlib.repr(metadata)}")
    metas = [m for m in BUILTIN_QUANT_DTYPES.values()
             if m.cname == info.get("name") and m.np_dtype_str == storage.name]
    scale, zero_point = info.get("scale"), info.get("zero_point")
    unsigned = bool(metas) and metas[0].is_unsigned
    if not (metas and isinstance(scale, (float, int)) and type(scale) is not bool
            and math.isfinite(scale) and scale > 0
            and set(info) == ({"name", "scale", "zero_point"} if unsigned else {"name", "scale"})
            and (not unsigned or type(zero_point) is int)):
        raise refuse(f"the file holds a dtype with metadata {reprlib.repr(metadata)}")
    try:
        return create_quantized_dtype(metas[0], float(scale), zero_point)
    except OpArgumentError as e:  # a zero point outside the type's range
        raise refuse(f"the file holds an invalid quantized dtype: {e}") from None


_NDARRAY = object()  # what `numpy.ndarray` stands for: only ever an argument of `_reconstruct`


def _array(raw: Any, dtype: Any, shape: Any, order: str = "C") -> np.ndarray:
    """A native-order copy of the array that `raw` holds, every size checked first."""
    if not isinstance(dtype, _Dtype):
        raise refuse(f"array dtype {reprlib.repr(dtype)} is not a numpy dtype")
    if not (isinstance(shape, tuple) and len(shape) <= _MAX_NDIM
            and all(type(d) is int and d >= 0 for d in shape)):
        raise refuse(f"invalid array shape {reprlib.repr(shape)}")
    if not isinstance(raw, (bytes, bytearray)):  # object arrays pickle a list of objects
        raise refuse(f"array data is a {type(raw).__name__}, not bytes")
    nbytes = math.prod(shape) * dtype.dtype.itemsize
    if len(raw) != nbytes or order not in ("C", "F"):
        raise CheckpointError(f"an array of shape {shape} and dtype {dtype.dtype} holds "
                              f"{len(raw)} bytes, not {nbytes}")
    a = np.frombuffer(raw, dtype.dtype).reshape(shape, order="F" if order == "F" else "C")
    return a.astype(a.dtype.newbyteorder("="), order="C")


class _Array(Stub):
    """`_reconstruct(numpy.ndarray, (0,), b"b")`, then BUILD with
    `(version, shape, dtype, is_fortran, raw bytes)`."""

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise refuse(f"malformed array state {reprlib.repr(state)}")
        shape, dtype, fortran, raw = state[-4:]
        self.array = _array(raw, dtype, shape, "F" if fortran else "C")

    def value(self) -> np.ndarray:
        if self.array is None:
            raise refuse("an array in the file has no data")
        return self.array


def _reconstruct(cls: Any, shape: Any, typecode: Any) -> _Array:
    if cls is not _NDARRAY:
        raise refuse(f"numpy _reconstruct of {reprlib.repr(cls)}, not of numpy.ndarray")
    return _Array()


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """numpy's protocol-5 reduction of a contiguous array."""
    return _array(buf, dtype, shape, order)


def _scalar(dtype: Any, raw: Any = None) -> np.generic:
    # numpy's annotations give `a[()]` of a 0-d array as an array; it is a scalar
    return _array(raw, dtype, ())[()]  # type: ignore[return-value]


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    """How protocol 2 stores bytes: `_codecs.encode(str, "latin1")`."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise refuse(f"_codecs.encode of {type(text).__name__} with {encoding!r}")
    return text.encode("latin1")


# ----- MegEngine --------------------------------------------------------------------------------
class _MegEngineTensor(Stub):
    """`megengine.tensor.Tensor.__new__(cls, data, dtype, device, ...)`, then BUILD with a state
    dict: empty in MegEngine 1.x, or `{"data", "dtype", "device"}` in older files."""

    parameter = False

    def __new__(cls, *args: Any, **kwargs: Any) -> _MegEngineTensor:
        self = super().__new__(cls)
        self.args = args
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise refuse(f"malformed MegEngine tensor state {reprlib.repr(state)}")
        state = dict(state)
        if "data" in state:
            self.args = (state.pop("data"), state.pop("dtype", None))
        if state.pop("qparams", None) is not None or state.pop("qdict", None) is not None:
            raise refuse("the file holds a quantized MegEngine tensor")
        state.pop("device", None)
        state.pop("name", None)
        if state:
            raise refuse(f"unknown MegEngine tensor state {sorted(state)}")

    def value(self) -> Tensor:
        if not self.args:
            raise refuse("a MegEngine tensor in the file has no data")
        data = self.args[0].value() if isinstance(self.args[0], Stub) else self.args[0]
        dtype = self.args[1].value() if len(self.args) > 1 and isinstance(self.args[1], _Dtype) \
            else None
        if not isinstance(data, (np.ndarray, np.generic, int, float, bool, list)):
            raise refuse(f"MegEngine tensor data of type {type(data).__name__}")
        arr = np.asarray(data, dtype)
        if arr.dtype.name not in DTYPES:
            raise refuse(f"a MegEngine tensor of dtype {arr.dtype}")
        return (Parameter if self.parameter else Tensor)(jnp.asarray(arr))


class _MegEngineParameter(_MegEngineTensor):
    parameter = True


# ----- the unpickler ----------------------------------------------------------------------------
GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("_codecs", "encode"): _codecs_encode,
    ("numpy", "dtype"): _Dtype,
    ("numpy", "ndarray"): _NDARRAY,
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _reconstruct for core in ("core", "_core")},
    **{(f"numpy.{core}.multiarray", "scalar"): _scalar for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _frombuffer for core in ("core", "_core")},
    ("megengine.tensor", "Tensor"): _MegEngineTensor,
    ("megengine.tensor", "Parameter"): _MegEngineParameter,
}
"""The globals a pickle may name, each mapped to what stands for it here."""


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles with `globals` (by default `GLOBALS`) the only names a file may use; refuses
    every persistent id (a subclass admits the ones its format defines)."""

    def __init__(self, file: Any, globals: dict[tuple[str, str], Any] | None = None):
        super().__init__(file)
        self.admitted = GLOBALS if globals is None else globals

    def find_class(self, module: str, name: str) -> Any:
        # Python 3 writes some names in their Python 2 spelling for protocols 0 to 2
        # (`__builtin__.set`); map them back, as pickle's own find_class does
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        try:
            return self.admitted[(module, name)]
        except (KeyError, TypeError):
            raise CheckpointError(_REFUSED.format(name=f"{module}.{name}")) from None

    def persistent_load(self, pid: Any) -> Any:
        raise refuse(f"the pickle refers to an outside object by the persistent id "
                     f"{reprlib.repr(pid)}, which eg.load does not know")


def unpickle(data: bytes | io.BytesIO) -> Any:
    """The object of one pickle (`data`, or the next one in the stream), stand-ins replaced."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    return finish(load(RestrictedUnpickler(stream)))


def load(unpickler: pickle.Unpickler) -> Any:
    """`unpickler.load()`; pickle allocates the sizes a file declares before reading them, so a
    MemoryError there means a corrupt size, not a large checkpoint."""
    try:
        return unpickler.load()
    except MemoryError:
        raise CheckpointError("the pickle declares an object larger than memory can hold; the "
                              "file is corrupt") from None


# ----- stand-ins to values ----------------------------------------------------------------------
_PLAIN = (type(None), bool, int, float, complex, str, bytes, np.ndarray, np.generic)


def finish(obj: Any) -> Any:
    """`obj` with every stand-in replaced by its value and containers rebuilt as plain ones; an
    object shared in the file stays shared, a cycle or nesting past `MAX_DEPTH` raises."""
    return _Finisher().run(obj, 0)


class _Finisher:
    def __init__(self) -> None:
        # id -> (the object, its value): holding the object keeps its id from being reused
        self.done: dict[int, tuple[Any, Any]] = {}

    def run(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, _PLAIN):
            return obj
        if id(obj) in self.done:
            return self.done[id(obj)][1]
        if depth >= MAX_DEPTH:
            raise CheckpointError(f"the pickle nests containers more than {MAX_DEPTH} deep, "
                                  "or contains itself")
        kind = type(obj)
        if isinstance(obj, Stub):
            value = obj.value()
        elif kind in (list, tuple, set, frozenset):
            value = kind(self.run(v, depth + 1) for v in obj)
        elif kind in (dict, OrderedDict):
            value = kind((self.key(k), self.run(v, depth + 1)) for k, v in dict.items(obj))
        else:
            raise refuse(f"the pickle holds a {kind.__name__}")
        self.done[id(obj)] = (obj, value)
        return value

    def key(self, k: Any) -> Any:
        if isinstance(k, (type(None), bool, int, float, str, bytes)):
            return k
        if type(k) is tuple:
            return tuple(self.key(v) for v in k)
        raise refuse(f"a dict key of type {type(k).__name__}")
