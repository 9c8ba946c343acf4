"""PyTorch checkpoints read without torch (Note [foreign files are data] in `pickle_reader`).

`torch.save` writes a zip: `<name>/data.pkl`, a pickle whose tensors are calls of
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` with each storage a
persistent id `("storage", torch.FloatStorage, key, location, numel)`, and one stored entry
`<name>/data/<key>` of raw bytes per storage (`<name>/byteorder` says which order). Its legacy
format (`_use_new_zipfile_serialization=False`) is a sequence of pickles, a magic number, a
protocol, system information, the object and the list of storage keys, followed by each
storage as an 8-byte element count and its bytes. Both go through the restricted unpickler,
with torch's two tensor rebuilders and its storage types admitted as well.
"""

from __future__ import annotations

import io
import math
import reprlib
import zipfile
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..core.errors import CheckpointError
from ..core.tensors import Parameter, Tensor
from .checkpoint_format import DTYPES
from .checkpoint_format import _entry as read_entry
from .pickle_reader import GLOBALS, RestrictedUnpickler, Stub, finish, load, refuse, unpickle

MAGIC = 0x1950A86A20F9469CFC6C
"""The first pickle of a legacy `torch.save` file."""
_PROTOCOL = 1001
_EXPANSION = 8  # tensors may take this many times the file's size (views share a storage)
_STORAGES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}


class _StorageType:
    """What `torch.FloatStorage` and the like stand for: only ever part of a persistent id."""

    def __init__(self, dtype: str):
        self.dtype = DTYPES[dtype]


class _Storage:
    """A storage's elements, filled once its bytes are read."""

    def __init__(self, dtype: np.dtype, numel: int):
        self.dtype, self.numel = dtype, numel
        self.data: np.ndarray | None = None

    def fill(self, raw: bytes, order: str) -> None:
        a = np.frombuffer(raw, self.dtype.newbyteorder(">" if order == ">" else "<"))
        self.data = a.astype(self.dtype)  # native order, an array of its own


class _Budget:
    """The bytes the file's tensors may still take: a stride-0 view of a small storage must not
    expand into a huge array."""

    def __init__(self, size: int):
        self.left = _EXPANSION * size + 2**20

    def take(self, nbytes: int, shape: tuple[int, ...]) -> None:
        if nbytes > self.left:
            raise CheckpointError(f"a tensor of shape {shape} would take {nbytes} bytes, more "
                                  f"than {_EXPANSION} times the file's size; eg.load refuses "
                                  "such expansions of a storage (save contiguous tensors)")
        self.left -= nbytes


class _Tensor(Stub):
    """`_rebuild_tensor_v2(storage, offset, size, stride, ...)`: a view of a storage, copied
    out once every storage is read."""

    def __init__(self, budget: _Budget, storage: Any, offset: Any, size: Any, stride: Any):
        self.budget, self.storage, self.offset = budget, storage, offset
        self.size, self.stride, self.parameter = size, stride, False

    def value(self) -> Tensor:
        arr = self._array()
        return (Parameter if self.parameter else Tensor)(jnp.asarray(arr))

    def _array(self) -> np.ndarray:
        s, offset, size, stride = self.storage, self.offset, self.size, self.stride
        if not isinstance(s, _Storage) or s.data is None:
            raise refuse(f"a tensor's storage is {reprlib.repr(s)}, not a storage in the file")
        if not (_ints(size) and _ints(stride) and len(size) == len(stride)
                and type(offset) is int and offset >= 0):
            raise refuse(f"malformed tensor view: offset {reprlib.repr(offset)}, size "
                         f"{reprlib.repr(size)}, stride {reprlib.repr(stride)}")
        n = math.prod(size)
        end = offset + sum((d - 1) * st for d, st in zip(size, stride)) + 1 if n else offset
        if end > s.numel:
            raise CheckpointError(f"a tensor of size {size}, stride {stride} at offset {offset} "
                                  f"reaches past its storage of {s.numel} elements")
        self.budget.take(n * s.dtype.itemsize, size)
        item = s.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(s.data[offset:], size, [st * item for st in stride])
        return np.array(view)


def _ints(v: Any) -> bool:
    return isinstance(v, tuple) and len(v) <= 64 and all(type(d) is int and d >= 0 for d in v)


def _parameter(data: Any, *rest: Any) -> Any:
    """`_rebuild_parameter(data, requires_grad, backward_hooks)`: a Parameter of `data`."""
    if not isinstance(data, _Tensor):
        raise refuse(f"a Parameter of {type(data).__name__}")
    data.parameter = True
    return data


def _globals(budget: _Budget) -> dict[tuple[str, str], Any]:
    def rebuild(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _Tensor:
        return _Tensor(budget, storage, offset, size, stride)

    return {
        **GLOBALS,
        **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGES.items()},
        ("torch._utils", "_rebuild_tensor_v2"): rebuild,
        ("torch._utils", "_rebuild_tensor"): rebuild,
        ("torch._utils", "_rebuild_parameter"): _parameter,
        ("torch", "Size"): tuple,
    }


class _TorchUnpickler(RestrictedUnpickler):
    """Admits torch's rebuilders and storages; `storage(key, dtype, numel)` gives the storage
    a persistent id names."""

    def __init__(self, file: Any, storage: Callable[[str, np.dtype, int], _Storage],
                 budget: _Budget):
        super().__init__(file, _globals(budget))
        self.storage = storage

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)
                and type(pid[4]) is int and pid[4] >= 0 and (len(pid) == 5 or pid[5] is None)):
            return super().persistent_load(pid)
        return self.storage(pid[2], pid[1].dtype, pid[4])


def _storages(make: Callable[[str, np.dtype, int], _Storage]) -> tuple[dict, Callable]:
    """A table of storages by key and the lookup that fills it with `make`, once per key."""
    table: dict[str, _Storage] = {}

    def storage(key: str, dtype: np.dtype, numel: int) -> _Storage:
        if key not in table:
            table[key] = make(key, dtype, numel)
        s = table[key]
        if s.dtype != dtype or s.numel != numel:
            raise CheckpointError(f"storage {key!r} is named as {s.numel} {s.dtype} elements "
                                  f"and as {numel} {dtype} elements")
        return s

    return table, storage


# ----- the zip format ---------------------------------------------------------------------------
def zip_prefix(z: zipfile.ZipFile) -> str | None:
    """The folder of `data.pkl` when `z` is a PyTorch checkpoint, else None."""
    names = z.namelist()
    pickles = [n for n in names if n.rsplit("/", 1)[-1] == "data.pkl" and n.count("/") <= 1]
    if "manifest.json" in names or len(pickles) != 1:
        return None
    return pickles[0][: -len("data.pkl")]


def read_zip(z: zipfile.ZipFile, prefix: str, size: int) -> Any:
    """The object stored in the PyTorch zip `z` (of `size` bytes)."""
    order = "<"
    if f"{prefix}byteorder" in z.namelist():
        found = {b"little": "<", b"big": ">"}.get(read_entry(z, f"{prefix}byteorder", None, size))
        if found is None:
            raise CheckpointError(f"{prefix}byteorder is neither 'little' nor 'big'")
        order = found

    def make(key: str, dtype: np.dtype, numel: int) -> _Storage:
        s = _Storage(dtype, numel)
        s.fill(read_entry(z, f"{prefix}data/{key}", numel * dtype.itemsize, size), order)
        return s

    _, storage = _storages(make)
    data = read_entry(z, f"{prefix}data.pkl", None, size)
    return finish(load(_TorchUnpickler(io.BytesIO(data), storage, _Budget(size))))


# ----- plain pickles: MegEngine's, or PyTorch's legacy format -----------------------------------
def read_pickle(data: bytes) -> Any:
    """The object in a pickle file: PyTorch's legacy format when it starts with torch's magic
    number, otherwise one pickled object (`megengine.save`, `pickle.dump`)."""
    stream = io.BytesIO(data)
    first = unpickle(stream)
    if type(first) is not int or first != MAGIC:
        return first
    if unpickle(stream) != _PROTOCOL:
        raise CheckpointError(f"a legacy PyTorch file of a protocol other than {_PROTOCOL}")
    info = unpickle(stream)
    order = "<" if not isinstance(info, dict) or info.get("little_endian", True) else ">"
    table, storage = _storages(lambda key, dtype, numel: _Storage(dtype, numel))
    obj = load(_TorchUnpickler(stream, storage, _Budget(len(data))))
    keys = unpickle(stream)
    if not isinstance(keys, list) or set(keys) != set(table):
        raise CheckpointError(f"the storage keys {reprlib.repr(keys)} do not match the "
                              f"{len(table)} storages the object uses")
    for key in keys:
        s = table[key]
        numel = int.from_bytes(stream.read(8), "little" if order == "<" else "big")
        raw = stream.read(s.numel * s.dtype.itemsize)
        if numel != s.numel or len(raw) != s.numel * s.dtype.itemsize:
            raise CheckpointError(f"storage {key!r} is truncated or of the wrong size")
        s.fill(raw, order)
    return finish(obj)
