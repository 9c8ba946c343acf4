"""The checkpoint format behind `eg.save` / `eg.load`, and the checks that make loading safe.

A checkpoint is a zip archive of `manifest.json` and one entry `arrays/<i>` per array, raw
little-endian bytes, every entry stored uncompressed. The manifest is
`{"format": "eager-checkpoint", "version": 1, "tree": ..., "arrays": [{"dtype", "shape"}, ...]}`;
`tree` mirrors the saved object: plain values as themselves, containers as `{"list": [...]}`,
`{"tuple": [...]}` or `{"dict": [[key, value], ...]}`, arrays as `{"tensor" | "ndarray" |
"scalar": i}`.

Loading trusts nothing in the file and runs none of it: a dtype is looked up by exact name in a
fixed table (never parsed), every size is checked against dtype x shape and against the size of
the file before a byte is read, nothing is inflated, nesting is bounded and each array is used
once. So what `load` allocates stays within a small multiple of the file's own size.
"""

from __future__ import annotations

import json
import math
import reprlib
import zipfile
from typing import Any, BinaryIO

import jax.numpy as jnp
import numpy as np

from ..core.errors import CheckpointError
from ..core.tensors import Tensor, made

FORMAT = "eager-checkpoint"
VERSION = 1
MAX_DEPTH = 100
"""The most containers a checkpoint nests in one another (a state dict needs a handful)."""
_MAX_NDIM = 64  # numpy's own limit

_NUMPY_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128")
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
              "float8_e4m3b11fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu",
              "float4_e2m1fn", "int2", "int4", "uint2", "uint4")
# The dtypes a checkpoint holds, by name. A name read from a file is only looked up here: numpy's
# dtype parser would also accept object, string, structured and sub-array dtypes.
DTYPES: dict[str, np.dtype] = {
    **{name: np.dtype(name) for name in _NUMPY_DTYPES},
    **{name: np.dtype(getattr(jnp, name)) for name in _ML_DTYPES if hasattr(jnp, name)},
}


# ----- writing ----------------------------------------------------------------------------------
def write(f: BinaryIO, obj: Any) -> None:
    """Write `obj` as a checkpoint to the binary file `f`."""
    arrays: list[np.ndarray] = []
    tree = _encode(obj, arrays, "obj", set())
    meta = [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]
    manifest = {"format": FORMAT, "version": VERSION, "tree": tree, "arrays": meta}
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for i, a in enumerate(arrays):
            z.writestr(f"arrays/{i}", np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes())


def _encode(obj: Any, arrays: list[np.ndarray], path: str, active: set[int]) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)):  # before float: np.float64 subclasses it
        arrays.append(_storable(np.asarray(obj), path))
        return {"ndarray" if isinstance(obj, np.ndarray) else "scalar": len(arrays) - 1}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Tensor):
        arrays.append(_storable(obj.numpy(), path))
        return {"tensor": len(arrays) - 1}
    if isinstance(obj, (list, tuple, dict)):
        return _encode_container(obj, arrays, path, active)
    raise TypeError(f"eg.save: cannot store {type(obj).__name__} at {path}; checkpoints hold "
                    "tensors, numpy arrays, numbers, strings, None, lists, tuples and dicts")


def _encode_container(obj: list | tuple | dict, arrays: list[np.ndarray], path: str,
                      active: set[int]) -> dict:
    # `active` holds the containers enclosing `obj`: its size is the depth, and meeting one of
    # them again is a cycle (which would otherwise recurse until RecursionError).
    if id(obj) in active:
        raise CheckpointError(f"eg.save: {_short(path)} contains itself (a reference cycle); "
                              "a checkpoint holds a tree: break the cycle before saving")
    if len(active) >= MAX_DEPTH:
        raise CheckpointError(f"eg.save: the object at {_short(path)} nests containers more than "
                              f"{MAX_DEPTH} deep, which checkpoints do not hold; flatten it")
    active.add(id(obj))
    try:
        if isinstance(obj, dict):
            return {"dict": [[_key(k, path), _encode(v, arrays, f"{path}[{k!r}]", active)]
                             for k, v in obj.items()]}
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays, f"{path}[{i}]", active) for i, v in enumerate(obj)]}
    finally:
        active.discard(id(obj))


def _short(path: str) -> str:
    return path if len(path) <= 60 else f"{path[:57]}..."


def _key(k: Any, path: str) -> Any:
    if k is None or isinstance(k, (bool, int, float, str)):
        return k
    raise TypeError(f"eg.save: dict key {k!r} at {path} is not a str, int, float, bool or None")


def _storable(a: np.ndarray, path: str) -> np.ndarray:
    if a.dtype.name not in DTYPES:
        raise TypeError(f"eg.save: cannot store an array of dtype {a.dtype} at {path}; "
                        "checkpoints hold bool, integer, float and complex arrays (bfloat16 and "
                        "float8 included): convert it, or store strings as str")
    return a


# ----- reading ----------------------------------------------------------------------------------
def read(z: zipfile.ZipFile, size: int) -> Any:
    """The object stored in the open checkpoint `z`, an archive of `size` bytes."""
    manifest = _parse_manifest(_entry(z, "manifest.json", None, size))
    metas = manifest["arrays"]
    if not isinstance(metas, list):
        raise CheckpointError(f"manifest 'arrays' is {reprlib.repr(metas)}, not a list")
    specs = [_array_spec(i, meta) for i, meta in enumerate(metas)]
    total = sum(nbytes for _, _, nbytes in specs)
    if total > size:  # e.g. entries overlapping, so that one stored byte is read many times
        raise CheckpointError(f"the manifest declares {total} bytes of arrays, more than the "
                              f"{size} bytes of the whole file")
    arrays = [np.frombuffer(_entry(z, f"arrays/{i}", nbytes, size), dtype.newbyteorder("<"))
              .reshape(shape).astype(dtype) for i, (dtype, shape, nbytes) in enumerate(specs)]
    return _Decoder(arrays).decode(manifest["tree"], 0)


def _entry(z: zipfile.ZipFile, name: str, nbytes: int | None, size: int) -> bytes:
    """The bytes of entry `name`, read only after its header is checked: stored, not encrypted,
    within the file and, when `nbytes` is given, exactly that long."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise CheckpointError(f"entry {name} is missing") from None
    if info.flag_bits & 0x1:
        raise CheckpointError(f"entry {name} is encrypted; eg.save never encrypts")
    if info.compress_type != zipfile.ZIP_STORED:
        raise CheckpointError(f"entry {name} is compressed (zip method {info.compress_type}); "
                              "eg.save stores entries uncompressed and eg.load inflates nothing")
    if info.file_size != info.compress_size or info.file_size > size:
        raise CheckpointError(f"entry {name} declares {info.file_size} bytes stored in "
                              f"{info.compress_size}, in a file of {size} bytes")
    if nbytes is not None and info.file_size != nbytes:
        raise CheckpointError(f"entry {name} holds {info.file_size} bytes, but its dtype and "
                              f"shape need {nbytes} bytes")
    with z.open(info) as f:  # reads at most file_size bytes and checks their CRC
        data = f.read(info.file_size)
    if len(data) != info.file_size:
        raise CheckpointError(f"entry {name} is truncated")
    return data


def _parse_manifest(data: bytes) -> dict:
    try:
        manifest = json.loads(data)
    except RecursionError:
        raise CheckpointError(f"manifest.json nests too deep to parse; a checkpoint nests at "
                              f"most {MAX_DEPTH} containers") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an int of 5,000 digits
        raise CheckpointError(f"manifest.json is not valid JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError("not an eager checkpoint (no eager manifest)")
    version = manifest.get("version")
    if type(version) is not int or version != VERSION:
        raise CheckpointError(f"unsupported checkpoint version {reprlib.repr(version)}; this "
                              f"eager reads version {VERSION}")
    if not {"tree", "arrays"} <= manifest.keys():
        raise CheckpointError("manifest.json lacks 'tree' or 'arrays'")
    return manifest


def _array_spec(i: int, meta: Any) -> tuple[np.dtype, tuple[int, ...], int]:
    """The dtype, shape and byte size that `arrays/<i>` declares, each checked."""
    name = f"arrays/{i}"
    if not isinstance(meta, dict) or set(meta) != {"dtype", "shape"}:
        raise CheckpointError(f"{name}: malformed description {reprlib.repr(meta)}; expected "
                              "{'dtype': ..., 'shape': [...]}")
    dtype = DTYPES.get(meta["dtype"]) if isinstance(meta["dtype"], str) else None
    if dtype is None:
        raise CheckpointError(f"{name}: unsupported dtype {reprlib.repr(meta['dtype'])}; "
                              f"checkpoints hold {', '.join(DTYPES)}")
    shape = meta["shape"]
    if not (isinstance(shape, list) and len(shape) <= _MAX_NDIM
            and all(type(d) is int and d >= 0 for d in shape)):
        raise CheckpointError(f"{name}: invalid shape {reprlib.repr(shape)}; expected a list of "
                              f"at most {_MAX_NDIM} non-negative integers")
    if math.prod(max(d, 1) for d in shape) * dtype.itemsize >= 2**62:  # numpy would overflow
        raise CheckpointError(f"{name}: shape {reprlib.repr(shape)} is too large for any array")
    return dtype, tuple(shape), math.prod(shape) * dtype.itemsize


class _Decoder:
    """Rebuilds the saved object from the manifest's tree, with `arrays` read and checked."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.used: set[int] = set()

    def decode(self, node: Any, depth: int) -> Any:
        """The object for `node`, enclosed in `depth` containers."""
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict) or len(node) != 1:
            raise CheckpointError(f"malformed checkpoint entry {reprlib.repr(node)}")
        (kind, value), = node.items()
        if kind in ("tensor", "ndarray", "scalar"):
            return self._array(kind, value)
        if kind not in ("list", "tuple", "dict"):
            raise CheckpointError(f"unknown checkpoint entry kind {reprlib.repr(kind)}")
        if depth >= MAX_DEPTH:
            raise CheckpointError(f"the stored object nests containers more than {MAX_DEPTH} "
                                  "deep, which checkpoints do not hold")
        if not isinstance(value, list):
            raise CheckpointError(f"malformed {kind} entry {reprlib.repr(value)}")
        if kind == "dict":
            return dict(self._item(pair, depth + 1) for pair in value)
        items = [self.decode(v, depth + 1) for v in value]
        return items if kind == "list" else tuple(items)

    def _item(self, pair: Any, depth: int) -> tuple[Any, Any]:
        if not (isinstance(pair, list) and len(pair) == 2
                and (pair[0] is None or isinstance(pair[0], (bool, int, float, str)))):
            raise CheckpointError(f"malformed dict item {reprlib.repr(pair)}; expected "
                                  "[key, value] with a str, number, bool or None key")
        return pair[0], self.decode(pair[1], depth)

    def _array(self, kind: str, index: Any) -> Any:
        if type(index) is not int or not 0 <= index < len(self.arrays):
            raise CheckpointError(f"checkpoint entry refers to array {reprlib.repr(index)}, "
                                  "which does not exist")
        if index in self.used:  # eg.save stores each array once; a reuse would multiply memory
            raise CheckpointError(f"array {index} is referred to twice")
        self.used.add(index)
        a = self.arrays[index]
        if kind == "tensor":
            return made(jnp.asarray(a))
        if kind == "ndarray":
            return a
        if a.ndim:
            raise CheckpointError(f"scalar entry refers to array {index} of shape {a.shape}")
        return a[()]
