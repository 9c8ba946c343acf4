"""Checkpoints: `save` and `load` nested dicts, lists and tuples of tensors, numpy arrays and
plain Python values, in a format that runs no code on load.

A checkpoint is a zip archive holding `manifest.json` (the structure, with each array as a
reference) and one raw little-endian byte file per array. Loading parses JSON and copies bytes:
no pickle, no imports, no calls. Writes go to a temporary file in the same folder, are flushed
and fsynced, then renamed over the target, so a crash mid-write leaves the old file intact.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import jax.numpy as jnp
import numpy as np

from .errors import CheckpointError
from .tensor import Tensor

_FORMAT = "eager-checkpoint"
_VERSION = 1


def _encode(obj: Any, arrays: list[np.ndarray], path: str) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)):  # before float: np.float64 subclasses it
        arrays.append(np.asarray(obj))
        return {"ndarray" if isinstance(obj, np.ndarray) else "scalar": len(arrays) - 1}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Tensor):
        arrays.append(obj.numpy())
        return {"tensor": len(arrays) - 1}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (bool, int, float, str))):
                raise TypeError(f"eg.save: dict key {k!r} at {path} is not a str, int, float, "
                                "bool or None")
            items.append([k, _encode(v, arrays, f"{path}[{k!r}]")])
        return {"dict": items}
    raise TypeError(f"eg.save: cannot store {type(obj).__name__} at {path}; checkpoints hold "
                    "tensors, numpy arrays, numbers, strings, None, lists, tuples and dicts")


def _write(f: BinaryIO, obj: Any) -> None:
    arrays: list[np.ndarray] = []
    tree = _encode(obj, arrays, "obj")
    meta = [{"dtype": a.dtype.name, "shape": list(a.shape)} for a in arrays]
    manifest = {"format": _FORMAT, "version": _VERSION, "tree": tree, "arrays": meta}
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for i, a in enumerate(arrays):
            z.writestr(f"arrays/{i}", np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes())


def save(obj: Any, path: str | os.PathLike | BinaryIO) -> None:
    """Write `obj` (e.g. `{"model": net.state_dict(), "opt": opt.state_dict()}`) to `path`.

    >>> import eager as eg, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "ckpt.eg")
    >>> eg.save({"w": eg.ones((2,)), "step": 3}, p)
    >>> eg.load(p)["step"]
    3
    """
    if hasattr(path, "write"):
        _write(path, obj)  # type: ignore[arg-type]
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            _write(f, obj)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(target.parent)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _decode(node: Any, arrays: list[np.ndarray]) -> Any:
    if not isinstance(node, dict):
        return node
    if len(node) != 1:
        raise CheckpointError(f"malformed checkpoint entry {node!r:.80}")
    (kind, value), = node.items()
    if kind in ("tensor", "ndarray", "scalar") and not (
            isinstance(value, int) and 0 <= value < len(arrays)):
        raise CheckpointError(f"checkpoint entry refers to array {value!r}, which does not exist")
    if kind == "tensor":
        return Tensor(jnp.asarray(arrays[value]))
    if kind == "ndarray":
        return arrays[value]
    if kind == "scalar":
        return arrays[value][()]
    if kind in ("list", "tuple"):
        items = [_decode(v, arrays) for v in value]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: _decode(v, arrays) for k, v in value}
    raise CheckpointError(f"unknown checkpoint entry kind {kind!r}")


def load(path: str | os.PathLike | BinaryIO) -> Any:
    """Read a checkpoint written by `save`. Raises `CheckpointError` for anything else."""
    name = getattr(path, "name", path)
    try:
        with zipfile.ZipFile(path) as z:  # a path is opened and closed by ZipFile
            manifest = json.loads(z.read("manifest.json"))
            if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
                raise CheckpointError(f"{name} is not an eager checkpoint (no eager manifest)")
            if manifest.get("version") != _VERSION:
                raise CheckpointError(f"{name}: unsupported checkpoint version "
                                      f"{manifest.get('version')!r}")
            arrays = [_read_array(z, i, m) for i, m in enumerate(manifest["arrays"])]
            return _decode(manifest["tree"], arrays)
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, KeyError, IndexError, ValueError, EOFError, OSError,
            TypeError) as e:
        raise CheckpointError(f"{name} is not a readable eager checkpoint (truncated or "
                              f"corrupt): {e}") from e


def _read_array(z: zipfile.ZipFile, i: int, meta: dict) -> np.ndarray:
    dtype, shape = jnp.dtype(meta["dtype"]), tuple(meta["shape"])
    data = z.read(f"arrays/{i}")
    if len(data) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise CheckpointError(f"array {i} has {len(data)} bytes, expected shape {shape} {dtype}")
    return np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape(shape).astype(dtype)
