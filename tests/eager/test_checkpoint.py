"""Tests for checkpoints (`eg.save` / `eg.load`): exact round trips of nested containers, tensors,
numpy arrays and scalars of every supported dtype and plain Python values; model and optimizer
state dicts through a file; the pickle-free zip format and its rejection of anything else; and
atomic writes that never damage an existing checkpoint.
"""

import io
import json
import os
import pickle
import zipfile

import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.module as M
import eager.optimizer as optim
import eager.serialization as serialization
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


def test_pickle_file_raises_checkpoint_error(tmp_path):
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"w": np.ones(3)}))
    with pytest.raises(eg.CheckpointError):
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
