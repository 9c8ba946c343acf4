"""Export (`fn.dump`, `partial.load`, `fn.export`): a dumped model gives eager's outputs in a
fresh process that imports only `partial` and numpy, at a fixed batch and, with
`dynamic_batch=True`, at other batch sizes; what cannot be one inference program is refused."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import (
    ExportError,
    ExportFileError,
    exclude_from_trace,
    load,
    partial_trace,
    xla_trace,
)
from tests.helpers import training_step

ROOT = Path(__file__).resolve().parents[2]

# Run in a fresh process: load each dump and run it on each input array of an .npz; the model
# classes of this file are never imported there.
LOADER = """
import sys
import numpy as np
import partial
for dump, inputs, outputs in zip(*[iter(sys.argv[1:])] * 3):
    model = partial.load(dump)
    with np.load(inputs) as z:
        np.savez(outputs, **{k: model(z[k]).numpy() for k in z.files})
assert not [m for m in sys.modules if m.startswith("tests")], "the defining code was imported"
"""


class CNN(M.Module):
    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(3, 4, 3, padding=1)
        self.bn = M.BatchNorm2d(4)
        self.fc = M.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        return self.fc(F.flatten(F.relu(self.bn(self.conv(x))), 1))


def _mlp():
    return M.Sequential(M.Linear(6, 16), M.ReLU(), M.Linear(16, 3))


def _x(rng, n, shape):
    return rng.standard_normal((n, *shape)).astype(np.float32)


def _round_trips(tmp_path, net, shape, rng):
    """Dump `net` (in eval mode, called at batch 4) four ways; run every dump in one fresh
    process; compare with eager at batch 4 (fixed) or batches 3 and 9 (dynamic)."""
    traced = partial_trace(net)
    traced(eg.tensor(_x(rng, 4, shape)))
    argv, expected = [], {}
    for dynamic in (False, True):
        for keep in (False, True):
            dump = tmp_path / f"model-{dynamic}-{keep}.dump"
            traced.dump(dump, dynamic_batch=dynamic, keep_params=keep)
            xs = {f"b{n}": _x(rng, n, shape) for n in ((3, 9) if dynamic else (4,))}
            np.savez(tmp_path / f"in-{dump.stem}.npz", **xs)
            expected[dump.stem] = {k: net(eg.tensor(v)).numpy() for k, v in xs.items()}
            argv += [dump, tmp_path / f"in-{dump.stem}.npz", tmp_path / f"out-{dump.stem}.npz"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", LOADER, *map(str, argv)], check=True, cwd=tmp_path,
                   env=env, timeout=120)
    for stem, want in expected.items():
        with np.load(tmp_path / f"out-{stem}.npz") as got:
            assert sorted(got.files) == sorted(want)
            for k in want:
                np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    return traced


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree (the CNN's
# round trip in a fresh process stays in it)
@pytest.mark.slow
def test_an_mlp_round_trips_in_a_fresh_process(tmp_path, rng):
    net = _mlp().eval()
    _round_trips(tmp_path, net, (6,), rng)
    manifest = load(tmp_path / "model-True-True.dump").manifest
    assert manifest["batch"] == "symbolic"  # jax's shape polymorphism, on the region itself
    assert manifest["inputs"] == [{"name": "x", "shape": ["batch", 6], "dtype": "float32"}]
    assert [p["name"] for p in manifest["params"]] == ["0.weight", "0.bias", "2.weight",
                                                       "2.bias"]


@pytest.mark.slow
def test_a_cnn_with_batchnorm_in_eval_mode_round_trips_in_a_fresh_process(tmp_path, rng):
    net = CNN()
    for _ in range(3):  # running statistics other than the initial ones
        net(eg.tensor(_x(rng, 8, (3, 6, 6)) * 2 + 1))
    net.eval()
    _round_trips(tmp_path, net, (3, 6, 6), rng)
    # flatten needs a concrete batch size: captured at batch 1, mapped over the batch
    assert load(tmp_path / "model-True-False.dump").manifest["batch"] == "per_example"


def test_keep_params_stores_the_parameters_and_otherwise_they_are_baked_in(tmp_path, rng):
    net = _mlp().eval()
    traced = partial_trace(net)
    traced(eg.tensor(_x(rng, 4, (6,))))
    traced.dump(tmp_path / "kept", keep_params=True)
    traced.dump(tmp_path / "baked")
    with zipfile.ZipFile(tmp_path / "kept") as z, np.load(z.open("params.npz")) as params:
        stored = [params[f"p{i}"] for i in range(len(params.files))]
    assert len(stored) == 4
    in_use_order = [net[0].weight, net[0].bias, net[2].weight, net[2].bias]  # as lifted
    for p, want in zip(stored, in_use_order):
        np.testing.assert_array_equal(p, want.numpy())
    with zipfile.ZipFile(tmp_path / "baked") as z:
        assert sorted(z.namelist()) == ["manifest.json", "model.stablehlo"]
    kept, baked = load(tmp_path / "kept"), load(tmp_path / "baked")
    assert len(kept.exported.in_avals) == 5 and len(baked.exported.in_avals) == 1
    x = _x(rng, 4, (6,))
    # Tensors, jax arrays, float64 numpy and inputs by name are all accepted; Tensors come back
    out = kept(x=eg.tensor(x))
    assert isinstance(out, eg.Tensor)
    # rtol 1e-5: XLA folds the baked constants into the program, which may round a product
    # differently (1.7e-6 relative seen on one CPU) from the same parameters as inputs
    np.testing.assert_allclose(out.numpy(), baked(jax.numpy.asarray(x)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(baked(x.astype(np.float64)).numpy(), net(eg.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"input `x` must be float32 of shape \[4, 6\]"):
        baked(_x(rng, 5, (6,)))


def test_dump_and_load_take_file_objects(rng):
    """MegEngine's `trace.dump` writes to a file object too (`io.BytesIO` for an upload)."""
    import io

    net = _mlp().eval()
    traced = partial_trace(net)
    x = _x(rng, 3, (6,))
    traced(eg.tensor(x))
    buf = io.BytesIO()
    traced.dump(buf)
    buf.seek(0)
    np.testing.assert_allclose(load(buf)(x).numpy(), net(eg.tensor(x)).numpy(), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(ExportFileError, match="<file object> is not a file written by fn.dump"):
        load(io.BytesIO(b"not a zip"))


def _dumped(tmp_path, rng):
    traced = partial_trace(_mlp().eval())
    traced(eg.tensor(_x(rng, 2, (6,))))
    traced.dump(tmp_path / "m.dump")
    with zipfile.ZipFile(tmp_path / "m.dump") as z:
        return {n: z.read(n) for n in z.namelist()}


def _rezip(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


def test_a_tampered_file_fails_with_a_clear_error(tmp_path, rng):
    members = _dumped(tmp_path, rng)
    model = bytearray(members["model.stablehlo"])
    model[len(model) // 2] ^= 0xFF
    _rezip(tmp_path / "payload", {**members, "model.stablehlo": bytes(model)})
    with pytest.raises(ExportFileError, match="checksum of model.stablehlo does not match"):
        load(tmp_path / "payload")
    manifest = json.loads(members["manifest.json"])
    manifest["inputs"][0]["shape"] = [8, 6]
    _rezip(tmp_path / "manifest", {**members, "manifest.json": json.dumps(manifest)})
    with pytest.raises(ExportFileError, match="manifest does not describe the program"):
        load(tmp_path / "manifest")
    raw = bytearray((tmp_path / "m.dump").read_bytes())
    raw[len(raw) // 3] ^= 0xFF  # bytes changed in place: the zip's CRC or structure fails
    (tmp_path / "flipped").write_bytes(bytes(raw))
    with pytest.raises(ExportFileError, match="changed after it was written|damaged"):
        load(tmp_path / "flipped")
    (tmp_path / "other").write_bytes(b"not a model")
    with pytest.raises(ExportFileError, match="not a file written by fn.dump"):
        load(tmp_path / "other")


def test_what_is_not_one_inference_program_is_refused(tmp_path, rng):
    x = eg.tensor(_x(rng, 4, (6,)))
    net = _mlp()

    @partial_trace
    def breaks(x):
        y = net(x)
        with exclude_from_trace():
            scale = 2.0 if float(y.sum().item()) > 0 else 1.0
        return y * scale

    breaks(x)
    with pytest.raises(ExportError, match="has graph breaks"):
        breaks.dump(tmp_path / "a")

    cnn = partial_trace(CNN())  # training mode: BatchNorm updates its running statistics
    with pytest.raises(ExportError, match="has no compiled entry to dump"):
        cnn.dump(tmp_path / "b")
    cnn(eg.tensor(_x(rng, 2, (3, 6, 6))))
    with pytest.raises(ExportError, match=r"writes state back .*bn\.running_mean.*\.eval\(\)"):
        cnn.dump(tmp_path / "b")
    cnn.eval()
    cnn(eg.tensor(_x(rng, 2, (3, 6, 6))))
    cnn.dump(tmp_path / "b")  # the eval-mode entry is the most recently used one now

    opt = optim.SGD(net.parameters(), lr=0.1)

    @xla_trace
    def step(x, y):
        gm = GradManager().attach(net.parameters())
        return training_step(gm, opt, lambda: F.cross_entropy(net(x), y))

    step(x, eg.tensor(np.zeros(4, np.int32)))
    with pytest.raises(ExportError, match="writes state back"):
        step.dump(tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # refusals write nothing


def test_dynamic_batch_refuses_examples_that_interact(tmp_path, rng):
    @partial_trace
    def centred(x):  # flatten needs a concrete batch; the mean mixes the examples
        h = F.flatten(x, 1)
        return h - h.mean(axis=0, keepdims=True)

    centred(eg.tensor(_x(rng, 4, (2, 3))))
    with pytest.raises(ExportError, match="examples interact"):
        centred.dump(tmp_path / "m", dynamic_batch=True)
    centred.dump(tmp_path / "m")  # at a fixed batch it is exact


def test_export_gives_jax_an_exported_function(rng):
    net = _mlp().eval()
    traced = partial_trace(net)
    x = _x(rng, 4, (6,))
    exported = traced.export(eg.tensor(x))
    assert isinstance(exported, jax.export.Exported)
    np.testing.assert_allclose(np.asarray(exported.call(x)), net(eg.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)
    assert traced.cache_info().captures == 0  # export captures on its own
    batch, = jax.export.symbolic_shape("b")
    poly = traced.export(jax.ShapeDtypeStruct((batch, 6), np.float32))
    x7 = _x(rng, 7, (6,))
    np.testing.assert_allclose(np.asarray(poly.call(x7)), net(eg.tensor(x7)).numpy(),
                               rtol=1e-5, atol=1e-6)
