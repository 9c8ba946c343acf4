"""The file `fn.dump` writes, and `load`, which runs it without the code that defined it.

A dump is a zip archive of three members:

- `manifest.json`: the format name and version, the input, output and parameter names, shapes
  (a symbolic batch axis as `"batch"`) and dtypes, and the sha256 of each other member;
- `model.stablehlo`: the program, `jax.export.Exported.serialize()` (a flatbuffer holding
  StableHLO bytecode; `jax.export.deserialize` reads it);
- `params.npz` (with `keep_params=True` only): the parameters, passed to the program after the
  inputs.

Loading parses JSON, the flatbuffer and the `.npz` (with `allow_pickle=False`): no Python code
from the file runs. A member changed after writing fails its checksum (or the zip's CRC); a
manifest that no longer describes the program fails the comparison with it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg

from ..errors import ExportFileError

FORMAT, VERSION = "partial.dump", 1
MANIFEST, MODEL, PARAMS = "manifest.json", "model.stablehlo", "params.npz"
_wrap = eg.hooks.wrap


@dataclass
class Artifact:
    """What `fn.dump` writes: the exported program and what the manifest says of it."""

    exported: jax.export.Exported
    input_names: list
    params: list  # numpy arrays, passed after the inputs (empty: baked in)
    param_names: list
    name: str
    batch: str  # "fixed", "symbolic" or "per_example" (see dump.py, Note [dynamic batch])


def _shape(aval: Any) -> list:
    return [str(d) if jax.export.is_symbolic_dim(d) else int(d) for d in aval.shape]


def _describe(names: list, avals: Any) -> list[dict]:
    return [{"name": n, "shape": _shape(a), "dtype": np.dtype(a.dtype).name}
            for n, a in zip(names, avals)]


def _output_names(tree: Any) -> list[str]:
    paths = jax.tree_util.tree_flatten_with_path(tree.unflatten(list(range(tree.num_leaves))))[0]
    return [jax.tree_util.keystr(p) or "output" for p, _ in paths]


def write(path: Any, art: Artifact) -> None:
    """Write `art` to `path` (atomically: a failed write leaves no half file), or into a
    binary file object (MegEngine's `trace.dump` takes either)."""
    ex = art.exported
    n = len(art.input_names)
    members = {MODEL: bytes(ex.serialize())}
    if art.params:
        buf = io.BytesIO()
        np.savez(buf, **{f"p{i}": p for i, p in enumerate(art.params)})
        members[PARAMS] = buf.getvalue()
    manifest = {
        "format": FORMAT, "version": VERSION, "name": art.name,
        "dynamic_batch": art.batch != "fixed", "batch": art.batch,
        "inputs": _describe(art.input_names, ex.in_avals[:n]),
        "outputs": _describe(_output_names(ex.out_tree), ex.out_avals),
        "params": _describe(art.param_names, ex.in_avals[n:]),
        "platforms": list(ex.platforms), "jax_version": jax.__version__,
        "sha256": {k: hashlib.sha256(v).hexdigest() for k, v in members.items()},
    }
    if hasattr(path, "write"):
        buf = io.BytesIO()  # whole, then one write: an error leaves the stream untouched
        _zip(buf, manifest, members)
        path.write(buf.getvalue())
        return
    # a temp of its own beside the target (threads of one process share a pid), renamed over it
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(os.fspath(path))}.",
                               suffix=".tmp", dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        _zip(tmp, manifest, members)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _zip(target: Any, manifest: dict, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(target, "w") as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1))
        for k, v in members.items():
            z.writestr(k, v)


def load(path: str | os.PathLike | BinaryIO) -> Loaded:
    """Read a model written by `fn.dump` (a path or a binary file object) and return it as a
    callable.

    The callable takes the inputs the traced function took (in the manifest's order, or by
    name), as Tensors, numpy arrays or jax arrays, and returns the function's output structure
    with eager Tensors as leaves (as `torch.export`'s and `torch.jit.load`'s modules return
    tensors; `.numpy()` gives arrays). No Python code from the file runs.

    Raises:
        ExportFileError: the file is not a dump, was changed after it was written, or has an
            unsupported format version.
    """
    where = getattr(path, "name", "<file object>") if hasattr(path, "read") else os.fspath(path)
    manifest, members = _read(path if hasattr(path, "read") else where, where)
    model = members[MODEL]
    for name, digest in manifest["sha256"].items():
        if hashlib.sha256(members[name]).hexdigest() != digest:
            raise ExportFileError(f"{where}: the checksum of {name} does not match the manifest: "
                                  "the file was changed after it was written. Dump it again.")
    try:
        exported = jax.export.deserialize(bytearray(model))
    except Exception as e:  # noqa: BLE001  (jax raises several kinds for a damaged program)
        raise ExportFileError(f"{where}: {MODEL} cannot be read as a jax.export program: {e}") \
            from None
    params = _params(where, manifest, members.get(PARAMS))
    _check_manifest(where, manifest, exported)
    return Loaded(exported, manifest, params)


def _read(source: Any, where: str) -> tuple[dict, dict]:
    """(manifest, members by name), checking the format and the version."""
    try:
        with zipfile.ZipFile(source) as z:
            members = {n: z.read(n) for n in z.namelist()}  # checks every member's CRC
        manifest = json.loads(members[MANIFEST])
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as e:
        raise ExportFileError(f"{where} is not a file written by fn.dump, or it is damaged "
                              f"({type(e).__name__}: {e}).") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ExportFileError(f"{where}: its manifest is not that of a file written by fn.dump.")
    if manifest.get("version") != VERSION:
        raise ExportFileError(f"{where} has format version {manifest.get('version')!r}; this "
                              f"version of partial reads version {VERSION}. Dump it again.")
    missing = {MODEL, *manifest.get("sha256", {})} - set(members)
    if missing or MODEL not in manifest.get("sha256", {}):
        raise ExportFileError(f"{where}: members {sorted(missing) or [MODEL]} are missing or "
                              "unchecked: the file was changed after it was written.")
    return manifest, members


def _params(where: str, manifest: dict, data: bytes | None) -> list:
    if not manifest.get("params"):
        return []
    if data is None or PARAMS not in manifest["sha256"]:
        raise ExportFileError(f"{where}: the parameters ({PARAMS}) are missing.")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return [jnp.asarray(z[f"p{i}"]) for i in range(len(manifest["params"]))]
    except (KeyError, ValueError, OSError) as e:
        raise ExportFileError(f"{where}: {PARAMS} cannot be read ({e}).") from None


def _check_manifest(where: str, manifest: dict, exported: Any) -> None:
    """The manifest describes the program's inputs, parameters and outputs exactly."""
    inputs, params = manifest.get("inputs", []), manifest.get("params", [])
    names = [d.get("name") for d in inputs + params]
    ours = _describe(names, exported.in_avals)
    outs = _describe([d.get("name") for d in manifest.get("outputs", [])], exported.out_avals)
    if inputs + params != ours or manifest.get("outputs") != outs:
        raise ExportFileError(f"{where}: the manifest does not describe the program it holds: "
                              "the file was changed after it was written. Dump it again.")


class Loaded:
    """A program loaded from a dump: call it like the traced function it was dumped from.

    Attributes:
        manifest: the file's manifest (inputs, outputs, parameters: names, shapes, dtypes).
        exported: the `jax.export.Exported` (for `jax.export` users).
    """

    def __init__(self, exported: Any, manifest: dict, params: list):
        self.exported, self.manifest, self.params = exported, manifest, params
        self.inputs = manifest["inputs"]
        self._run = jax.jit(exported.call)  # compiled once per input shape

    def __repr__(self) -> str:
        sig = ", ".join(f"{d['name']}: {d['dtype']}{d['shape']}" for d in self.inputs)
        return f"<partial.load {self.manifest.get('name')!r}({sig})>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arrays = [self._array(d, a) for d, a in zip(self.inputs, self._bind(args, kwargs))]
        try:
            out = self._run(*arrays, *self.params)
        except ValueError as e:  # e.g. inputs whose batch sizes differ
            raise ValueError(f"{self!r}: {e}") from None
        return jax.tree.map(_wrap, out)

    def _bind(self, args: tuple, kwargs: dict) -> list:
        names = [d["name"] for d in self.inputs]
        given = list(args) + [kwargs.pop(n) for n in names[len(args):] if n in kwargs]
        if kwargs or len(given) != len(names):
            raise TypeError(f"{self!r} takes the inputs {names} (positionally, or by name); "
                            f"got {len(args)} positional and {sorted(kwargs)} by name")
        return given

    def _array(self, want: dict, x: Any) -> Any:
        a = eg.read(x) if isinstance(x, eg.Tensor) else x
        a = a if isinstance(a, jax.Array) else np.asarray(a)
        dtype = np.dtype(want["dtype"])
        fits = len(a.shape) == len(want["shape"]) and all(
            isinstance(w, str) or w == d for w, d in zip(want["shape"], a.shape))
        if not fits or not np.can_cast(a.dtype, dtype, "same_kind"):
            raise ValueError(f"{self!r}: input `{want['name']}` must be {want['dtype']} of "
                             f"shape {want['shape']}; got {np.dtype(a.dtype).name} of shape "
                             f"{list(a.shape)}")
        return a if a.dtype == dtype else jnp.asarray(a, dtype)
