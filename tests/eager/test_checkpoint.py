"""Tests for checkpoints (`eg.save` / `eg.load`): exact round trips of nested containers, tensors,
numpy arrays and scalars of every supported dtype and plain Python values; model and optimizer
state dicts through a file; the pickle-free zip format and its rejection of anything else,
hostile files included (bombs, lying sizes, odd dtypes, deep nesting), within bounded memory; and
atomic writes that never damage an existing checkpoint, by racing threads or killed writers.
"""

import io
import json
import os
import pickle
import struct
import subprocess
import sys
import threading
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.module as M
import eager.optimizer as optim
import eager.serialization.checkpoint_format as checkpoint_format
import eager.serialization.files as serialization
from eager.autodiff import GradManager


def assert_same(a, b, where="obj"):
    """Recursive equality that also requires identical types, dtypes, shapes and key order."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, (eg.Tensor, np.ndarray, np.generic)):
        x = a.numpy() if isinstance(a, eg.Tensor) else np.asarray(a)
        y = b.numpy() if isinstance(b, eg.Tensor) else np.asarray(b)
        assert x.dtype == y.dtype and x.shape == y.shape, f"{where}: {x.dtype}{x.shape}"
        if x.dtype == jnp.bfloat16:
            x, y = x.astype(np.float32), y.astype(np.float32)
        np.testing.assert_array_equal(x, y, err_msg=where)
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for (ka, va), kb in zip(a.items(), b):
            assert type(ka) is type(kb), f"{where}: key {ka!r}"
            assert_same(va, b[kb], f"{where}[{ka!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, f"{where}: expected nan"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def _round_trip(obj, tmp_path):
    path = tmp_path / "ckpt.eg"
    eg.save(obj, path)
    return eg.load(path)


def _sample(rng):
    return {
        "tensors": {
            "w": eg.tensor(rng.standard_normal((2, 3)).astype(np.float32)),
            "idx": eg.tensor(np.array([3, -1, 7], np.int32)),
            "flag": eg.tensor(np.array([True, False])),
            "half": eg.tensor(np.array([0.5, -2.0], np.float16)),
            "bf16": eg.tensor(np.array([1.5, -0.25], jnp.bfloat16)),
            "scalar": eg.tensor(2.5),
        },
        "arrays": [
            rng.standard_normal((3, 2)).astype(np.float32),
            np.arange(6, dtype=np.int32).reshape(2, 3),
            np.array([[True], [False]]),
            np.array([1.0, -0.5, 65504.0], np.float16),
            np.array([3.0, -1.5, 0.0078125], jnp.bfloat16),
            np.arange(4, dtype=np.uint8),
            np.arange(3, dtype=np.int64),
            np.zeros((0, 3), np.float32),
            np.array(7.25, np.float32),
            np.arange(12, dtype=np.float32).reshape(3, 4).T,
        ],
        "scalars": (np.float32(1.5), np.int32(-4), np.int64(2**40), np.bool_(True),
                    np.float16(0.25), np.float64(1 / 3)),
        "plain": [1, -2**45, 2.5, float("inf"), float("nan"), "text ✓", "", None, True, False],
        3: "int key",
        "3": "str key",
        0.5: "float key",
        None: "none key",
        "nested": ({"a": [(), [], {}]}, [(1, (2, [3]))]),
    }


def test_nested_structures_round_trip_exactly(rng, tmp_path):
    obj = _sample(rng)
    assert_same(obj, _round_trip(obj, tmp_path))


def test_loaded_tensors_are_independent_tensors(tmp_path):
    t = eg.tensor([1.0, 2.0])
    loaded = _round_trip({"t": t}, tmp_path)["t"]
    assert isinstance(loaded, eg.Tensor) and loaded is not t
    assert (loaded * 2).numpy().tolist() == [2.0, 4.0]


def test_parameter_is_saved_as_tensor_values(tmp_path):
    p = eg.Parameter([1.0, 2.0])
    loaded = _round_trip([p], tmp_path)[0]
    assert isinstance(loaded, eg.Tensor)
    np.testing.assert_array_equal(loaded.numpy(), [1.0, 2.0])


def test_big_endian_array_loads_with_the_same_values(tmp_path):
    arr = np.arange(5, dtype=">i4") * 1000
    loaded = _round_trip(arr, tmp_path)
    np.testing.assert_array_equal(loaded, arr)
    assert loaded.dtype.kind == "i" and loaded.dtype.itemsize == 4


@pytest.mark.parametrize("obj", [0, 1.5, "s", None, True, [], {}, ()])
def test_top_level_plain_values(obj, tmp_path):
    assert_same(obj, _round_trip(obj, tmp_path))


def test_file_object_round_trip(rng):
    obj = _sample(rng)
    buf = io.BytesIO()
    eg.save(obj, buf)
    buf.seek(0)
    assert_same(obj, eg.load(buf))


def test_str_path_round_trip(tmp_path):
    path = str(tmp_path / "model.eg")
    eg.save({"a": np.ones(2, np.float32)}, path)
    np.testing.assert_array_equal(eg.load(path)["a"], np.ones(2))


def _model():
    return M.Sequential(M.Linear(3, 4), M.BatchNorm1d(4), M.ReLU(), M.Linear(4, 2))


def _train_step(net, opt, x):
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward((net(x) ** 2).mean())
    opt.step().clear_grad()


def test_model_and_optimizer_state_round_trip_through_a_file(rng, tmp_path):
    x = eg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    net = _model()
    opt = optim.Adam(net.parameters(), lr=0.05, betas=(0.8, 0.9))
    _train_step(net, opt, x)
    path = tmp_path / "train.eg"
    eg.save({"model": net.state_dict(), "opt": opt.state_dict(), "epoch": 1}, path)
    ckpt = eg.load(path)
    assert ckpt["epoch"] == 1
    assert_same(dict(net.state_dict()), ckpt["model"])
    assert_same(opt.state_dict(), ckpt["opt"])

    net2 = _model()
    net2.load_state_dict(ckpt["model"])
    opt2 = optim.Adam(net2.parameters())
    opt2.load_state_dict(ckpt["opt"])
    assert opt2.param_groups[0]["lr"] == 0.05
    assert tuple(opt2.param_groups[0]["betas"]) == (0.8, 0.9)
    for _ in range(2):
        _train_step(net, opt, x)
        _train_step(net2, opt2, x)
    for (name, a), b in zip(net.state_dict().items(), net2.state_dict().values()):
        np.testing.assert_array_equal(a, b, err_msg=name)


# ----- format -----------------------------------------------------------------------------------
def test_file_is_a_zip_with_a_json_manifest_and_raw_arrays(tmp_path):
    path = tmp_path / "c.eg"
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    eg.save({"a": arr, "t": eg.tensor([1.5]), "n": 2}, path)
    assert zipfile.is_zipfile(path)
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        manifest = json.loads(z.read("manifest.json"))
        raw = {n: z.read(n) for n in names if n != "manifest.json"}
    assert sorted(names) == ["arrays/0", "arrays/1", "manifest.json"]
    assert sorted(raw.values(), key=len) == [np.float32(1.5).tobytes(), arr.astype("<i4").tobytes()]
    assert isinstance(manifest, dict) and manifest["format"] == "eager-checkpoint"


def test_load_never_unpickles(monkeypatch, rng, tmp_path):
    path = tmp_path / "c.eg"
    obj = _sample(rng)
    eg.save(obj, path)

    def boom(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, boom)
    monkeypatch.setattr(np, "load", boom)
    assert_same(obj, eg.load(path))


def _write_zip(path, entries):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)


def _manifest(tree, arrays=(), fmt="eager-checkpoint", version=1):
    return json.dumps({"format": fmt, "version": version, "tree": tree, "arrays": list(arrays)})


BAD_ZIPS = {
    "no-manifest": {"arrays/0": b"\0" * 4},
    "manifest-not-json": {"manifest.json": b"{not json"},
    "manifest-a-list": {"manifest.json": b"[1, 2]"},
    "foreign-format": {"manifest.json": _manifest(1, fmt="other")},
    "future-version": {"manifest.json": _manifest(1, version=99)},
    "missing-array": {"manifest.json": _manifest({"tensor": 0},
                                                 [{"dtype": "float32", "shape": [2]}])},
    "short-array": {"manifest.json": _manifest({"ndarray": 0},
                                               [{"dtype": "float32", "shape": [4]}]),
                    "arrays/0": b"\0" * 8},
    "object-dtype": {"manifest.json": _manifest({"ndarray": 0},
                                                [{"dtype": "object", "shape": [1]}]),
                     "arrays/0": b"\0" * 8},
    "unknown-kind": {"manifest.json": _manifest({"callable": "os.system"})},
    "bad-dict": {"manifest.json": _manifest({"dict": [[1]]})},
    "bad-list": {"manifest.json": _manifest({"list": 5})},
    "array-index-out-of-range": {"manifest.json": _manifest({"tensor": 3})},
}


@pytest.mark.parametrize("name", sorted(BAD_ZIPS))
def test_malformed_zip_raises_checkpoint_error(name, tmp_path):
    path = tmp_path / "bad.eg"
    _write_zip(path, BAD_ZIPS[name])
    with pytest.raises(eg.CheckpointError):
        eg.load(path)


def test_pickle_file_naming_more_than_arrays_raises_checkpoint_error(tmp_path):
    # a pickle of arrays loads (MegEngine's format, tests/eager/test_foreign_checkpoints.py);
    # one that names any other global is refused
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"w": np.ones(3), "r": range(3)}))
    with pytest.raises(eg.CheckpointError, match="builtins.range"):
        eg.load(path)


def test_random_bytes_and_empty_file_raise_checkpoint_error(rng, tmp_path):
    for i, data in enumerate([rng.bytes(512), b""]):
        path = tmp_path / f"junk{i}"
        path.write_bytes(data)
        with pytest.raises(eg.CheckpointError):
            eg.load(path)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.1])
def test_truncated_checkpoint_raises_checkpoint_error(rng, tmp_path, keep):
    path = tmp_path / "c.eg"
    eg.save({"w": rng.standard_normal((16, 16)).astype(np.float32), "k": [1, 2]}, path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(eg.CheckpointError):
        eg.load(path)
    with pytest.raises(eg.CheckpointError):
        eg.load(io.BytesIO(data[:int(len(data) * keep)]))


def test_checkpoint_error_is_an_eager_value_error():
    assert issubclass(eg.CheckpointError, eg.EagerError)
    assert issubclass(eg.CheckpointError, ValueError)


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        eg.load(tmp_path / "nope.eg")


# ----- unsupported objects and atomic writes ----------------------------------------------------
class Custom:
    pass


@pytest.mark.parametrize("bad", [
    {"f": lambda: 0},
    {"obj": Custom()},
    [1, {2, 3}],
    {(1, 2): "tuple key"},
    {"c": 1 + 2j},
    {"b": b"bytes"},
], ids=["lambda", "custom-class", "set", "tuple-key", "complex", "bytes"])
def test_unsupported_objects_raise_type_error_and_keep_the_old_file(bad, tmp_path):
    path = tmp_path / "c.eg"
    eg.save({"old": np.arange(3, dtype=np.float32)}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        eg.save(bad, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.eg"]
    np.testing.assert_array_equal(eg.load(path)["old"], [0.0, 1.0, 2.0])


def test_crash_mid_write_keeps_the_old_file_and_leaves_no_temp(monkeypatch, tmp_path):
    path = tmp_path / "c.eg"
    eg.save({"version": 1}, path)
    before = path.read_bytes()
    real_write = serialization._write

    def crashing_write(f, obj):
        real_write(f, obj)
        f.seek(0)
        f.write(b"half-written garbage")
        raise OSError("disk full")

    monkeypatch.setattr(serialization, "_write", crashing_write)
    with pytest.raises(OSError, match="disk full"):
        eg.save({"version": 2, "w": np.ones(100, np.float32)}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["c.eg"]
    assert eg.load(path) == {"version": 1}


def test_save_replaces_an_existing_checkpoint(tmp_path):
    path = tmp_path / "c.eg"
    eg.save({"version": 1}, path)
    eg.save({"version": 2, "w": eg.ones(2)}, path)
    loaded = eg.load(path)
    assert loaded["version"] == 2
    np.testing.assert_array_equal(loaded["w"].numpy(), [1.0, 1.0])
    assert os.listdir(tmp_path) == ["c.eg"]


@pytest.mark.parametrize("ref", [-1, 5, "0", 1.0])
def test_manifest_referring_to_a_missing_array_raises(tmp_path, ref):
    path = tmp_path / "bad.ckpt"
    manifest = {"format": "eager-checkpoint", "version": 1, "tree": {"tensor": ref},
                "arrays": [{"dtype": "float32", "shape": [1]}]}
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        z.writestr("arrays/0", np.zeros(1, np.float32).tobytes())
    with pytest.raises(eg.CheckpointError, match="does not exist"):
        eg.load(path)


# ----- hostile and corrupt files ----------------------------------------------------------------
def _one_array(dtype, shape, data=b"", tree=None):
    """A zip whose manifest declares one array `dtype`/`shape`, holding `data` as arrays/0."""
    return {"manifest.json": _manifest(tree or {"ndarray": 0}, [{"dtype": dtype, "shape": shape}]),
            "arrays/0": data}


HOSTILE_ZIPS = {
    "negative-dim": _one_array("float32", [-1]),
    "float-dim": _one_array("float32", [1.5], b"\0" * 4),
    "bool-dim": _one_array("float32", [True], b"\0" * 4),
    "str-dim": _one_array("float32", ["1"], b"\0" * 4),
    "shape-not-a-list": _one_array("float32", 1, b"\0" * 4),
    "overflowing-shape": _one_array("float32", [2**40, 2**40, 2**40, 2**40]),
    "huge-dim-beside-zero": _one_array("float32", [0, 10**30]),
    "too-many-dims": _one_array("float32", [1] * 65, b"\0" * 4),
    "unknown-dtype": _one_array("float33", [1], b"\0" * 4),
    "float128-dtype": _one_array("float128", [1], b"\0" * 16),
    "str-dtype": _one_array("<U1", [1], b"\0" * 4),
    "structured-dtype": _one_array("f4,i4", [1], b"\0" * 8),
    "subarray-dtype": _one_array("(2,)f4", [1], b"\0" * 8),
    "datetime-dtype": _one_array("datetime64[s]", [1], b"\0" * 8),
    "dtype-a-dict": _one_array({"names": ["a"], "formats": ["O"]}, [1], b"\0" * 8),
    "scalar-of-a-vector": _one_array("float32", [2], b"\0" * 8, tree={"scalar": 0}),
    "array-used-twice": _one_array("float32", [1], b"\0" * 4,
                                   tree={"list": [{"ndarray": 0}, {"ndarray": 0}]}),
    "bool-array-ref": _one_array("float32", [1], b"\0" * 4, tree={"ndarray": True}),
    "array-meta-extra-key": {"manifest.json": _manifest(
        {"ndarray": 0}, [{"dtype": "float32", "shape": [1], "offset": 3}]), "arrays/0": b"\0" * 4},
    "arrays-not-a-list": {"manifest.json": json.dumps(
        {"format": "eager-checkpoint", "version": 1, "tree": 1, "arrays": {"0": 1}})},
    "no-tree": {"manifest.json": json.dumps(
        {"format": "eager-checkpoint", "version": 1, "arrays": []})},
    "bare-list-tree": {"manifest.json": _manifest([1, {"ndarray": 0}])},
    "unhashable-key": {"manifest.json": _manifest({"dict": [[[1], 2]]})},
    "dict-pair-of-three": {"manifest.json": _manifest({"dict": [[1, 2, 3]]})},
    "dict-not-a-list": {"manifest.json": _manifest({"dict": 5})},
    "manifest-not-utf8": {"manifest.json": b"\xff\xfe{"},
    "huge-int-literal": {"manifest.json": _manifest(0).replace(": 0", ": " + "1" * 5000)},
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ZIPS))
def test_hostile_manifest_raises_checkpoint_error(name, tmp_path):
    path = tmp_path / "bad.eg"
    _write_zip(path, HOSTILE_ZIPS[name])
    with pytest.raises(eg.CheckpointError):
        eg.load(path)


@pytest.mark.parametrize("dtype", ["float128", "<U1", "object", "datetime64[s]", "f4,i4"])
def test_unknown_dtypes_name_the_entry(dtype, tmp_path):
    path = tmp_path / "bad.eg"
    _write_zip(path, _one_array(dtype, [1], b"\0" * 8))
    with pytest.raises(eg.CheckpointError, match=r"arrays/0.*dtype"):
        eg.load(path)


def _peak_bytes_of_load(path):
    """Peak memory traced while `eg.load(path)` runs; it must raise CheckpointError."""
    tracemalloc.start()
    try:
        with pytest.raises(eg.CheckpointError) as info:
            eg.load(path)
        return tracemalloc.get_traced_memory()[1], str(info.value)
    finally:
        tracemalloc.stop()


def test_compressed_bomb_is_refused_before_inflating(tmp_path):
    path = tmp_path / "bomb.eg"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("manifest.json", _manifest({"ndarray": 0}, [{"dtype": "float32", "shape": [1]}]))
        info = zipfile.ZipInfo("arrays/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w") as f:  # 64 MiB of zeros, deflated to 64 KB
            for _ in range(64):
                f.write(bytes(1 << 20))
    assert path.stat().st_size < 1 << 20
    peak, message = _peak_bytes_of_load(path)
    assert peak < 2 << 20, f"load allocated {peak} bytes before refusing"
    assert "arrays/0" in message


def test_entry_larger_than_its_dtype_and_shape_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.eg"
    _write_zip(path, _one_array("float32", [1], bytes(8 << 20)))
    peak, message = _peak_bytes_of_load(path)
    assert peak < 2 << 20, f"load allocated {peak} bytes before refusing"
    assert "arrays/0" in message and "4 bytes" in message


def _local_header(name, data, flags=0, method=0):
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0, zlib.crc32(data),
                       len(data), len(data), len(name), 0) + name.encode()


def _central_header(name, data, offset, flags=0, method=0):
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, method, 0, 0,
                       zlib.crc32(data), len(data), len(data), len(name), 0, 0, 0, 0, 0,
                       offset) + name.encode()


def _raw_zip(body, central):
    """A zip of local entries `body` and central directory entries `central` (lists of bytes)."""
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central),
                      len(b"".join(central)), len(b"".join(body)), 0)
    return b"".join(body + central) + end


def test_overlapping_entries_cannot_multiply_what_is_read(tmp_path):
    # arrays/0's stored bytes are arrays/1 whole (header and data): each byte of the file would be
    # read twice, and a chain of such entries N times, from a file that holds it once.
    big = bytes(range(256)) * 256
    outer = _local_header("arrays/1", big) + big
    manifest = _manifest({"list": [{"ndarray": 0}, {"ndarray": 1}]},
                         [{"dtype": "uint8", "shape": [len(outer)]},
                          {"dtype": "uint8", "shape": [len(big)]}]).encode()
    body = _local_header("arrays/0", outer) + outer
    offsets = [0, len(_local_header("arrays/0", outer)), len(body)]
    body += _local_header("manifest.json", manifest) + manifest
    central = [_central_header(n, d, o) for n, d, o in zip(
        ["arrays/0", "arrays/1", "manifest.json"], [outer, big, manifest], offsets)]
    path = tmp_path / "overlap.eg"
    path.write_bytes(_raw_zip([body], central))
    try:
        with zipfile.ZipFile(path) as z:  # the trick is valid zip: each entry reads on its own
            assert z.read("arrays/0") == outer and z.read("arrays/1") == big
    except zipfile.BadZipFile:  # Python >= 3.12's zipfile finds overlapping entries itself
        pass
    with pytest.raises(eg.CheckpointError, match="more than the"):  # eager's own bound
        eg.load(path)


@pytest.mark.parametrize("flags, method", [(0, zipfile.ZIP_DEFLATED), (0, zipfile.ZIP_LZMA),
                                           (1, zipfile.ZIP_STORED), (0, 99)],
                         ids=["deflated", "lzma", "encrypted", "unknown-method"])
def test_compressed_encrypted_and_unknown_method_entries_are_refused(flags, method, tmp_path):
    manifest = _manifest({"ndarray": 0}, [{"dtype": "float32", "shape": [1]}]).encode()
    data = bytes(4)
    if method in (zipfile.ZIP_DEFLATED, zipfile.ZIP_LZMA):  # a real compressed entry
        path = tmp_path / "c.eg"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("manifest.json", manifest)
            z.writestr("arrays/0", data, compress_type=method)
    else:  # zipfile cannot write these: build the bytes
        head = _local_header("manifest.json", manifest) + manifest
        body = [head, _local_header("arrays/0", data, flags, method) + data]
        central = [_central_header("manifest.json", manifest, 0),
                   _central_header("arrays/0", data, len(head), flags, method)]
        path = tmp_path / "c.eg"
        path.write_bytes(_raw_zip(body, central))
        # what zipfile itself raises: not a CheckpointError
        with zipfile.ZipFile(path) as z, pytest.raises((RuntimeError, NotImplementedError)):
            z.read("arrays/0")
    with pytest.raises(eg.CheckpointError, match="arrays/0"):
        eg.load(path)


def _deep_manifest(depth):
    return ('{"format": "eager-checkpoint", "version": 1, "arrays": [], "tree": '
            + '{"list": [' * depth + "0" + "]}" * depth + "}")


@pytest.mark.parametrize("depth", [5000, serialization.MAX_DEPTH + 1])
def test_deeply_nested_manifest_raises_checkpoint_error(depth, tmp_path):
    path = tmp_path / "deep.eg"
    _write_zip(path, {"manifest.json": _deep_manifest(depth)})
    with pytest.raises(eg.CheckpointError, match="deep"):
        eg.load(path)


def _nest(depth, leaf=0):
    for i in range(depth):
        leaf = [leaf] if i % 3 == 0 else ({"k": leaf} if i % 3 == 1 else (leaf,))
    return leaf


def test_nesting_up_to_the_limit_round_trips(tmp_path):
    obj = _nest(serialization.MAX_DEPTH, np.float32(1.5))
    assert_same(obj, _round_trip(obj, tmp_path))


@pytest.mark.parametrize("depth", [5000, serialization.MAX_DEPTH + 1])
def test_saving_too_deep_an_object_raises_and_keeps_the_old_file(depth, tmp_path):
    path = tmp_path / "c.eg"
    eg.save({"old": 1}, path)
    with pytest.raises(eg.CheckpointError, match="deep"):
        eg.save(_nest(depth), path)
    assert os.listdir(tmp_path) == ["c.eg"] and eg.load(path) == {"old": 1}


def test_saving_a_reference_cycle_raises(tmp_path):
    looped = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(eg.CheckpointError, match="itself"):
        eg.save(looped, tmp_path / "c.eg")
    shared = [1.0]
    assert _round_trip([shared, shared], tmp_path) == [[1.0], [1.0]]  # sharing is not a cycle


@pytest.mark.parametrize("name", sorted(checkpoint_format.DTYPES))
def test_every_dtype_a_file_may_name_round_trips(name, tmp_path):
    arr = np.array([[0, 1], [1, 0]]).astype(checkpoint_format.DTYPES[name])
    loaded = _round_trip({"a": arr, "s": arr[0, 1]}, tmp_path)
    assert loaded["a"].dtype == arr.dtype and loaded["a"].tobytes() == arr.tobytes()
    assert type(loaded["s"]) is type(arr[0, 1]) and loaded["s"].tobytes() == arr[0, 1].tobytes()


@pytest.mark.parametrize("bad", [
    np.array([object(), 1], dtype=object),
    np.array(["ab", "c"]),
    np.str_("text"),
    np.zeros(2, dtype="f4,i4"),
    np.zeros(2, dtype="datetime64[s]"),
], ids=["object", "str", "np-str", "structured", "datetime"])
def test_unsupported_array_dtypes_raise_type_error_on_save(bad, tmp_path):
    path = tmp_path / "c.eg"
    eg.save({"old": 1}, path)
    with pytest.raises(TypeError, match="dtype"):
        eg.save({"x": bad}, path)
    assert os.listdir(tmp_path) == ["c.eg"] and eg.load(path) == {"old": 1}


# ----- concurrent writers and killed writers ----------------------------------------------------
def test_threads_saving_to_one_path_never_collide_and_readers_see_whole_files(tmp_path):
    path = tmp_path / "c.eg"
    objs = {i: {"writer": i, "w": np.full(50_000, i, np.float32)} for i in range(-1, 4)}
    eg.save(objs[-1], path)
    errors, seen = [], set()
    start, writers_done = threading.Barrier(5), threading.Event()

    def write(obj):
        start.wait()
        try:
            for _ in range(12):
                eg.save(obj, path)
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    def read():
        start.wait()
        try:
            while True:
                done = writers_done.is_set()  # read once more after the last write
                got = eg.load(path)
                assert_same(objs[got["writer"]], got)
                seen.add(got["writer"])
                if done:
                    return
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=write, args=(objs[i],)) for i in range(4)]
    reader = threading.Thread(target=read)
    for t in [*threads, reader]:
        t.start()
    for t in threads:
        t.join()
    writers_done.set()
    reader.join()
    assert errors == []
    assert seen - {-1} and os.listdir(tmp_path) == ["c.eg"]


_STALLED_WRITER = """
import sys, time
import eager as eg
import eager.serialization.checkpoint_format as checkpoint_format
import eager.serialization.files as serialization

def stall(f, obj):  # write a megabyte of the temp file, say so, then wait to be killed
    f.write(bytes(1 << 20))
    f.flush()
    print("writing", flush=True)
    time.sleep(600)

serialization._write = stall
eg.save({"step": 1}, sys.argv[1])
"""


def test_temp_of_a_writer_killed_mid_save_is_removed_by_the_next_save(tmp_path):
    path = tmp_path / "c.eg"
    eg.save({"step": 0}, path)
    child = subprocess.Popen([sys.executable, "-c", _STALLED_WRITER, str(path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        line = child.stdout.readline()
    finally:
        child.kill()  # SIGKILL: no cleanup runs in the child
        _, err = child.communicate()
    assert line == "writing\n", err
    stale = [n for n in os.listdir(tmp_path) if n != "c.eg"]
    assert len(stale) == 1 and (tmp_path / stale[0]).stat().st_size == 1 << 20
    assert str(child.pid) in stale[0]
    eg.save({"step": 2}, path)
    assert os.listdir(tmp_path) == ["c.eg"] and eg.load(path) == {"step": 2}


def test_stale_temp_cleanup_spares_live_writers_other_hosts_and_other_files(monkeypatch, tmp_path):
    path = tmp_path / "c.eg"
    seen = []
    real_write = serialization._write

    def spy(f, obj):
        seen.extend(n for n in os.listdir(tmp_path) if n != "c.eg")
        real_write(f, obj)

    monkeypatch.setattr(serialization, "_write", spy)
    eg.save({"step": 0}, path)
    (ours,) = seen  # the temp of that save: .c.eg.<host tag>-<pid>-<random>.tmp
    tag, pid, rand = ours[len(".c.eg."):-len(".tmp")].split("-")
    assert pid == str(os.getpid())
    other_tag = "0" * len(tag) if tag != "0" * len(tag) else "1" * len(tag)
    leftover = f".c.eg.{tag}-{pid}-{'0' * len(rand)}.tmp"  # same pid, no save in flight: stale
    live = f".c.eg.{tag}-{os.getppid()}-{rand}.tmp"  # a live process: maybe still writing
    foreign = f".c.eg.{other_tag}-{2**31 - 2}-{rand}.tmp"  # another host: pid says nothing
    kept = [live, foreign, ".c.eg.notes", f".d.eg.{tag}-{2**31 - 2}-{rand}.tmp", "d.eg"]
    for name in [leftover, *kept]:
        (tmp_path / name).write_bytes(b"x")
    eg.save({"step": 1}, path)
    assert sorted(os.listdir(tmp_path)) == sorted(["c.eg", *kept])
