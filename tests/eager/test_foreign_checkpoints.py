"""Checkpoints from MegEngine and PyTorch: `eg.load` reads `megengine.save` pickles, PyTorch's
zip and legacy files and safetensors without running code from them; `load_state_dict` converts
MegEngine's layouts; optimizer state from MegEngine loads and steps on as MegEngine does.

The MegEngine fixtures in `data/megengine_files/` were written by real MegEngine 1.13 (`make.py`
there regenerates them), the PyTorch ones in `data/torch_files/` by torch (`make.py` too), so these
tests need neither. Tests that run torch itself skip without it.
"""

import io
import os
import pickle
import subprocess
import sys
import zipfile
from collections import OrderedDict
from fractions import Fraction
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager

DATA = Path(__file__).resolve().parent / "data"
MGE = DATA / "megengine_files"
TORCH = DATA / "torch_files"


@pytest.fixture(scope="module")
def mge_expected():
    with np.load(MGE / "expected.npz", allow_pickle=False) as f:
        return dict(f)


@pytest.fixture(scope="module")
def torch_expected():
    with np.load(TORCH / "expected.npz", allow_pickle=False) as f:
        return dict(f)


def _np(t):
    return t.numpy() if isinstance(t, eg.Tensor) else np.asarray(t)


# ----- files that are code, not data -------------------------------------------------------------
class _Payload:
    """Pickles as a call of `fn(*args)`, which unpickling runs."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _payloads(target):
    touch = f"open({str(target)!r}, 'w').close()"
    return {
        "os.system": _Payload(os.system, f"touch {target}"),
        "builtins.eval": _Payload(eval, touch),
        "builtins.exec": _Payload(exec, touch),
        "subprocess": _Payload(subprocess.call, ["touch", str(target)]),
    }


@pytest.mark.parametrize("kind", ["os.system", "builtins.eval", "builtins.exec", "subprocess"])
@pytest.mark.parametrize("where", ["top", "in-state-dict", "torch-zip"])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(kind, where, tmp_path):
    target = tmp_path / "pwned"
    payload = _payloads(target)[kind]
    path = tmp_path / "evil.pkl"
    if where == "top":
        path.write_bytes(pickle.dumps(payload))
    elif where == "in-state-dict":
        path.write_bytes(pickle.dumps(OrderedDict(w=np.ones(2, np.float32), b=[1, payload])))
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps({"w": payload}, protocol=2))
    name = {"os.system": r"(posix|nt|os)\.system", "subprocess": r"subprocess\.call"}.get(
        kind, kind.replace(".", r"\."))
    with pytest.raises(eg.CheckpointError, match=f"refuses the global {name}.*state dict"):
        eg.load(path)
    assert not target.exists()


def test_an_unknown_global_is_named_with_what_to_do(tmp_path):
    path = tmp_path / "f.pkl"
    path.write_bytes(pickle.dumps({"lr": Fraction(1, 3)}))
    with pytest.raises(eg.CheckpointError, match=r"f\.pkl.*fractions\.Fraction.*save its state"):
        eg.load(path)


@pytest.mark.parametrize("make, match", [
    (lambda: np.array([1, "a"], dtype=object), "dtype"),
    (lambda: np.array(["ab", "c"]), "dtype"),
    (lambda: np.zeros(2, [("a", "f4"), ("b", "i4")]), "dtype"),
    (lambda: np.ma.masked_array([1.0, 2.0]), "numpy.ma"),
    (lambda: np.array([1.0]).view(np.recarray), "recarray"),
], ids=["object", "str", "structured", "masked", "recarray"])
def test_arrays_that_are_not_plain_numeric_arrays_are_refused(make, match, tmp_path):
    path = tmp_path / "a.pkl"
    path.write_bytes(pickle.dumps({"a": make()}))
    with pytest.raises(eg.CheckpointError, match=match):
        eg.load(path)


class _WithPersistentId(pickle.Pickler):
    def persistent_id(self, obj):
        return ("storage", "x") if isinstance(obj, str) and obj == "outside" else None


def test_an_unknown_persistent_id_is_refused(tmp_path):
    buf = io.BytesIO()
    _WithPersistentId(buf, protocol=4).dump({"a": "outside"})
    path = tmp_path / "p.pkl"
    path.write_bytes(buf.getvalue())
    with pytest.raises(eg.CheckpointError, match="persistent id"):
        eg.load(path)


def test_a_pickle_that_contains_itself_is_refused(tmp_path):
    loop: list = [1]
    loop.append(loop)
    path = tmp_path / "loop.pkl"
    path.write_bytes(pickle.dumps({"loop": loop}))
    with pytest.raises(eg.CheckpointError, match="itself"):
        eg.load(path)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_plain_pickles_of_arrays_and_containers_load(protocol, tmp_path):
    obj = OrderedDict(
        w=np.arange(6, dtype=np.float32).reshape(2, 3), f=np.asfortranarray(np.ones((2, 3))),
        big=np.arange(3, dtype=">i4"), half=np.array([0.5], np.float16), s=np.float64(1.5),
        i=np.int64(7), n=[1, "x", None, (2.5, b"b")], st={1, 2}, fs=frozenset({"a"}))
    path = tmp_path / "ok.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    got = eg.load(path)
    assert type(got) is OrderedDict and list(got) == list(obj)
    for k in ("w", "f", "big", "half"):
        assert got[k].dtype == obj[k].dtype.newbyteorder("=") and got[k].flags.writeable
        np.testing.assert_array_equal(got[k], obj[k])
    assert got["s"] == 1.5 and type(got["s"]) is np.float64 and got["i"] == 7
    assert got["n"] == obj["n"] and got["st"] == {1, 2} and got["fs"] == frozenset({"a"})


def test_quantized_arrays_load_with_their_dtype(tmp_path):
    """A quantized model's `state_dict` as `megengine.save` writes it: int8 weights whose numpy
    dtype carries MegEngine's `mgb_dtype` metadata (the scale) load with it."""
    from eager.quantization.dtype import qint8, quint8

    obj = {"w": np.arange(-3, 3, dtype=np.int8).view(qint8(0.25)),
           "u": np.arange(4, dtype=np.uint8).view(quint8(0.5, 7))}
    path = tmp_path / "q.pkl"
    for protocol in (2, 4, 5):
        path.write_bytes(pickle.dumps(obj, protocol=protocol))
        got = eg.load(path)
        for k in obj:
            assert got[k].dtype.metadata == obj[k].dtype.metadata
            np.testing.assert_array_equal(got[k].view(got[k].dtype.str), obj[k].view(
                obj[k].dtype.str))


@pytest.mark.parametrize("metadata", [
    {"other": 1}, {"mgb_dtype": {"name": "QuantizedS8", "scale": 0.5, "extra": os.getcwd()}},
    {"mgb_dtype": {"name": "QuantizedS8", "scale": -1.0}},
    {"mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.5, "zero_point": 7}},  # not uint8
    {"mgb_dtype": {"name": "QuantizedS8", "scale": "0.5"}}], ids=str)
def test_other_dtype_metadata_is_refused(metadata, tmp_path):
    path = tmp_path / "m.pkl"
    path.write_bytes(pickle.dumps({"a": np.zeros(2, np.dtype("i1", metadata=metadata))}))
    with pytest.raises(eg.CheckpointError, match="metadata"):
        eg.load(path)


# ----- MegEngine ---------------------------------------------------------------------------------
class ConvNet(M.Module):
    """The network of `data/megengine_files/make.py`, in eager's modules."""

    def __init__(self):
        super().__init__()
        self.conv = M.Conv2d(4, 8, 3, padding=1, groups=2, bias=False)
        self.bn = M.BatchNorm2d(8)
        self.dw = M.Conv2d(8, 8, 3, padding=1, groups=8)
        self.up = M.ConvTranspose2d(8, 4, 2, stride=2, groups=2)
        self.fc = M.Linear(4, 3)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.up(self.dw(x))
        return self.fc(x.mean(axis=(2, 3)))


@pytest.fixture(scope="module")
def convnet():
    return ConvNet()


@pytest.fixture(scope="module")
def lstm():
    return M.LSTM(3, 4, num_layers=2, bidirectional=True)


def test_megengine_tensors_parameters_and_plain_values_load(mge_expected):
    got = eg.load(MGE / "tensors.mge")
    w = mge_expected["tensors.w"]
    assert type(got["w"]) is eg.Tensor and type(got["p"]) is eg.Parameter
    np.testing.assert_array_equal(got["w"].numpy(), w)
    np.testing.assert_array_equal(got["p"].numpy(), w[0])
    assert got["i"].dtype == np.int32 and got["i"].numpy().tolist() == [1, -2]
    assert got["h"].dtype == np.float16 and got["h"].numpy().tolist() == [0.5, -1.5]
    assert got["np"].dtype == np.int64 and got["np"].tolist() == list(range(6))
    assert got["scalar"] == np.float32(2.5)
    assert (got["epoch"], got["name"], got["lr"], got["none"], got["flags"]) == (
        3, "run", 0.5, None, (True, False))
    np.testing.assert_array_equal(got["nested"][0]["t"].numpy(), [[1.0], [2.0]])


def test_loading_imports_neither_framework(monkeypatch):
    for name in ("torch", "megengine"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it would raise
    assert eg.load(MGE / "tensors.mge")["epoch"] == 3
    assert "bn.running_var" in eg.load(TORCH / "small.pt")
    assert "w" in eg.load(TORCH / "legacy.pt")


def test_megengine_file_objects_load_too():
    with open(MGE / "layernorm.mge", "rb") as f:
        assert eg.load(f)["weight"].shape == (12,)


def test_megengine_conv_layouts_convert_on_load(convnet):
    state = eg.load(MGE / "convnet.mge")
    assert state["conv.weight"].shape == (2, 4, 2, 3, 3)  # groups, out/groups, in/groups, k, k
    assert state["dw.weight"].shape == (8, 1, 1, 3, 3)
    assert state["up.weight"].shape == (2, 4, 2, 2, 2)  # groups, in/groups, out/groups, k, k
    assert state["dw.bias"].shape == (1, 8, 1, 1)
    net = convnet
    net.load_state_dict(state)
    for name, p in list(net.named_parameters()) + list(net.named_buffers()):
        np.testing.assert_array_equal(p.numpy(), state[name].reshape(p.shape), err_msg=name)
    assert net.state_dict()["conv.weight"].shape == (2, 4, 2, 3, 3)


def test_megengine_layernorm_of_a_shape_loads(mge_expected):
    ln = M.LayerNorm((3, 4))
    ln.load_state_dict(eg.load(MGE / "layernorm.mge"))
    y = ln(eg.tensor(mge_expected["layernorm.x"])).numpy()
    np.testing.assert_allclose(y, mge_expected["layernorm.y"], rtol=1e-5, atol=1e-5)


def _lstm_reference(x, weights, layers, directions, hidden):
    """A numpy LSTM over time-major x, PyTorch's gate order, from eager's parameter names."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    hs, cs = [], []
    for layer in range(layers):
        outs = []
        for d in range(directions):
            sfx = f"l{layer}" + ("_reverse" if d else "")
            w_ih, w_hh, b_ih, b_hh = (weights[f"{k}_{sfx}"] for k in
                                      ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
            h = c = np.zeros((x.shape[1], hidden), np.float32)
            ys = []
            for t in (reversed(range(len(x))) if d else range(len(x))):
                i, f, g, o = np.split(x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=-1)
                c = sig(f) * c + sig(i) * np.tanh(g)
                h = sig(o) * np.tanh(c)
                ys.append(h)
            outs.append(np.stack(ys[::-1] if d else ys))
            hs.append(h)
            cs.append(c)
        x = np.concatenate(outs, axis=-1)
    return x, np.stack(hs), np.stack(cs)


def test_megengine_lstm_flat_weights_load_as_they_are(lstm, mge_expected):
    state = eg.load(MGE / "lstm.mge")
    assert state["_flatten_weights"].shape == (16, 46)
    assert sorted(state) == sorted(k for k, _ in lstm.named_parameters())  # MegEngine's
    lstm.load_state_dict(state)
    flat, start, weights = np.asarray(state["_flatten_weights"]).reshape(-1), 0, {}
    for name, shape in lstm._pieces():
        n = int(np.prod(shape))
        weights[name], start = flat[start:start + n].reshape(shape), start + n
    y, h, c = _lstm_reference(mge_expected["lstm.x"], weights, 2, 2, 4)
    for got, name in ((y, "y"), (h, "h"), (c, "c")):
        np.testing.assert_allclose(got, mge_expected[f"lstm.{name}"], rtol=1e-5, atol=1e-6)


def test_pytorch_named_recurrent_weights_pack_into_the_flat_buffer(lstm, mge_expected):
    """PyTorch's (and this project's earlier) per-layer names load into MegEngine's layout."""
    flat = np.asarray(eg.load(MGE / "lstm.mge")["_flatten_weights"]).reshape(-1)
    named, start = {}, 0
    for name, shape in lstm._pieces():
        n = int(np.prod(shape))
        named[name], start = flat[start:start + n].reshape(shape), start + n
    lstm.load_state_dict(named)
    np.testing.assert_array_equal(lstm._flatten_weights.numpy().reshape(-1), flat)
    np.testing.assert_array_equal(lstm.cells[1][1].weight_hh.numpy(),
                                  named["weight_hh_l1_reverse"])
    y = lstm(eg.tensor(mge_expected["lstm.x"]))[0]
    np.testing.assert_allclose(y.numpy(), mge_expected["lstm.y"], rtol=1e-5, atol=1e-5)
    with pytest.raises(eg.CheckpointError, match=r"weight_ih_l0 has shape \(16, 2\)"):
        lstm.load_state_dict({**named, "weight_ih_l0": named["weight_ih_l0"][:, :2]})


def test_megengine_attention_packed_weights_convert(mge_expected):
    mha = M.MultiHeadAttention(8, 2, batch_first=True)
    mha.load_state_dict(eg.load(MGE / "mha.mge"))
    w, b = mha.in_proj_weight.numpy(), mha.in_proj_bias.numpy()
    q, k = mge_expected["mha.q"], mge_expected["mha.k"]
    heads = lambda t: t.reshape(*t.shape[:2], 2, 4).transpose(0, 2, 1, 3)  # noqa: E731
    qh, kh, vh = (heads(t @ w[i * 8:(i + 1) * 8].T + b[i * 8:(i + 1) * 8])
                  for i, t in enumerate((q, k, k)))
    s = qh @ kh.transpose(0, 1, 3, 2) / 2.0
    p = np.exp(s - s.max(-1, keepdims=True))
    o = (p / p.sum(-1, keepdims=True)) @ vh
    y = o.transpose(0, 2, 1, 3).reshape(2, 3, 8) @ mha.out_proj.weight.numpy().T \
        + mha.out_proj.bias.numpy()
    np.testing.assert_allclose(y, mge_expected["mha.y"], rtol=1e-5, atol=1e-5)


def test_a_flat_buffer_of_the_wrong_size_names_it(lstm):
    state = eg.load(MGE / "lstm.mge")
    state["_flatten_weights"] = state["_flatten_weights"][:, 1:]
    with pytest.raises(ValueError, match=r"'_flatten_weights' has shape \(16, 45\)"):
        lstm.load_state_dict(state)


def test_a_shape_that_is_not_a_foreign_layout_still_raises(convnet):
    state = eg.load(MGE / "convnet.mge")
    state["conv.weight"] = np.zeros((4, 2, 2, 3, 3), np.float32)  # 4 groups, not 2
    with pytest.raises(ValueError, match=r"'conv.weight' has shape \(4, 2, 2, 3, 3\)"):
        convnet.load_state_dict(state)
    ln = M.LayerNorm((3, 4))
    with pytest.raises(ValueError, match="'weight' has shape"):
        ln.load_state_dict({"weight": np.ones(11, np.float32), "bias": np.ones(12, np.float32)})


def test_megengine_optimizer_state_loads_by_position(convnet, mge_expected):
    # MegEngine numbers parameters by sorted name, and so does `parameters()` here
    assert list(mge_expected["convnet.order"]) == [n for n, _ in convnet.named_parameters()]
    for name, opt_class in (("sgd", optim.SGD), ("adam", optim.Adam)):
        params = convnet.parameters()
        opt = opt_class(params, lr=1.0)
        saved = eg.load(MGE / f"{name}.mge")
        opt.load_state_dict(saved)
        assert opt.param_groups[0]["lr"] == saved["param_groups"][0]["lr"]
        for i, p in enumerate(params):
            for k, v in saved["state"][i].items():
                got = opt.state[p][k].numpy()
                np.testing.assert_array_equal(got, np.asarray(v).reshape(got.shape).astype(
                    got.dtype), err_msg=f"{name} {i} {k}")


def test_megengine_optimizer_state_in_the_wrong_order_says_how_to_fix_it(convnet):
    opt = optim.SGD(convnet.parameters()[::-1], lr=0.1, momentum=0.9)
    with pytest.raises(eg.CheckpointError, match=r"by position.*net.parameters\(\)"):
        opt.load_state_dict(eg.load(MGE / "sgd.mge"))


@pytest.mark.slow
def test_megengine_convnet_gives_megengine_outputs(mge_expected):
    net = ConvNet()
    net.load_state_dict(eg.load(MGE / "convnet.mge"))
    net.eval()
    y = net(eg.tensor(mge_expected["convnet.x"])).numpy()
    np.testing.assert_allclose(y, mge_expected["convnet.y"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_megengine_optimizer_state_steps_on_as_megengine_does(name, mge_expected):
    net = ConvNet()
    if name == "sgd":
        net.load_state_dict(eg.load(MGE / "convnet.mge"))
    else:
        prefix = "adam.step2."
        net.load_state_dict({k[len(prefix):]: v for k, v in mge_expected.items()
                             if k.startswith(prefix)})
    params = net.parameters()
    opt = (optim.SGD(params, lr=1.0) if name == "sgd" else optim.Adam(params))
    opt.load_state_dict(eg.load(MGE / f"{name}.mge"))
    gm = GradManager().attach(params)
    with gm:
        gm.backward((net(eg.tensor(mge_expected["convnet.x"])) ** 2).sum())
    opt.step()
    for k, p in net.named_parameters():
        want = mge_expected[f"{name}.step3.{k}"].reshape(p.shape)
        np.testing.assert_allclose(p.numpy(), want, rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.slow
def test_megengine_recurrent_and_attention_modules_give_megengine_outputs(mge_expected):
    x = eg.tensor(mge_expected["lstm.x"])
    lstm = M.LSTM(3, 4, num_layers=2, bidirectional=True)
    lstm.load_state_dict(eg.load(MGE / "lstm.mge"))
    y, (h, c) = lstm(x)
    rnn = M.RNN(3, 4, nonlinearity="relu", batch_first=True)
    rnn.load_state_dict(eg.load(MGE / "rnn.mge"))
    yr, hr = rnn(x)
    mha = M.MultiHeadAttention(8, 2, batch_first=True)
    mha.load_state_dict(eg.load(MGE / "mha.mge"))
    k = eg.tensor(mge_expected["mha.k"])
    ym = mha(eg.tensor(mge_expected["mha.q"]), k, k)[0]
    for got, name in ((y, "lstm.y"), (h, "lstm.h"), (c, "lstm.c"), (yr, "rnn.y"), (hr, "rnn.h"),
                      (ym, "mha.y")):
        np.testing.assert_allclose(got.numpy(), mge_expected[name], rtol=1e-5, atol=1e-5,
                                   err_msg=name)


# ----- PyTorch -----------------------------------------------------------------------------------
def test_torch_zip_state_dict_loads_with_num_batches_tracked(convnet, torch_expected):
    state = eg.load(TORCH / "small.pt")
    assert type(state) is OrderedDict and state["bn.num_batches_tracked"].numpy() == 7
    net = convnet
    net.load_state_dict(state)  # strict: the counter is accepted and dropped
    for name, p in list(net.named_parameters()) + list(net.named_buffers()):
        want = torch_expected[f"small.{name}"]  # PyTorch's layouts: per-channel vectors (C,)
        np.testing.assert_array_equal(p.numpy().reshape(want.shape), want, err_msg=name)


def test_torch_views_dtypes_and_plain_values_load(torch_expected):
    got = eg.load(TORCH / "tensors.pt")
    for k in ("t", "view", "row", "shared", "f16", "bool", "u8", "scalar", "param"):
        np.testing.assert_array_equal(got[k].numpy(), torch_expected[f"tensors.{k}"], err_msg=k)
        assert got[k].dtype == torch_expected[f"tensors.{k}"].dtype, k
    assert got["bf16"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(got["bf16"].numpy().astype(np.float32),
                                  torch_expected["tensors.bf16"])
    np.testing.assert_array_equal(got["i64"].numpy(), [3, -1, 7])  # int64 as jax's int32
    np.testing.assert_allclose(got["f64"].numpy(), [0.25, 1e-3])
    assert type(got["param"]) is eg.Parameter and type(got["t"]) is eg.Tensor
    assert got["plain"] == [1, 2.5, "s", None, (True, b"raw")]


def test_torch_legacy_format_loads():
    got = eg.load(TORCH / "legacy.pt")
    np.testing.assert_array_equal(got["w"].numpy(), np.arange(12, dtype=np.float32).reshape(2, 6))
    np.testing.assert_array_equal(got["b"].numpy(), [1, 2])


def _rewrite_torch_zip(src, dst, edit):
    """Copy the PyTorch zip `src` to `dst`, its data.pkl's bytes passed through `edit`."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            data = z.read(info)
            out.writestr(info, edit(data) if info.filename.endswith("data.pkl") else data)


def _torch_pickle(size, stride, numel, storage=b"FloatStorage"):
    """The data.pkl of a PyTorch zip holding {"w": a float tensor of `size` and `stride` over
    storage "0" of `numel` elements}, written opcode by opcode (protocol 2)."""
    def text(v):
        return b"X" + len(v).to_bytes(4, "little") + v.encode()

    def ints(vs):
        return b"(" + b"".join(b"J" + v.to_bytes(4, "little", signed=True) for v in vs) + b"t"

    return b"".join([
        b"\x80\x02}", text("w"), b"ctorch._utils\n_rebuild_tensor_v2\n(",
        b"(", text("storage"), b"ctorch\n" + storage + b"\n", text("0"), text("cpu"),
        ints([numel])[1:-1], b"tQ", b"J\0\0\0\0", ints(size), ints(stride),
        b"\x89ccollections\nOrderedDict\n)RtRs."])


@pytest.mark.parametrize("size, stride, numel, match", [
    ((4,), (1,), 4, None),
    ((5,), (1,), 4, "reaches past its storage of 4"),
    ((2, 3), (3, 2), 6, "reaches past"),
    ((10**5, 10**5), (0, 0), 4, "refuses such expansions"),
])
def test_torch_views_past_their_storage_or_expanding_it_are_refused(size, stride, numel, match,
                                                                    tmp_path):
    path = tmp_path / "view.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _torch_pickle(size, stride, numel))
        z.writestr("archive/data/0", np.arange(numel, dtype=np.float32).tobytes())
    if match is None:
        np.testing.assert_array_equal(eg.load(path)["w"].numpy(), np.arange(4))
        return
    with pytest.raises(eg.CheckpointError, match=match):
        eg.load(path)


@pytest.mark.parametrize("storage, entry, match", [
    (b"FloatStorage", np.zeros(3, np.float32).tobytes(), "holds 12 bytes.*need 16"),
    (b"ObjectStorage", np.zeros(4, np.float32).tobytes(), "torch.ObjectStorage"),
    (b"FloatStorage", None, "data/0 is missing"),
])
def test_torch_storages_that_do_not_match_are_refused(storage, entry, match, tmp_path):
    path = tmp_path / "bad.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", _torch_pickle((4,), (1,), 4, storage))
        if entry is not None:
            z.writestr("archive/data/0", entry)
    with pytest.raises(eg.CheckpointError, match=match):
        eg.load(path)


@pytest.mark.slow
def test_torch_small_net_gives_torch_outputs(torch_expected):
    net = ConvNet()
    net.load_state_dict(eg.load(TORCH / "small.pt"))
    net.eval()
    y = net(eg.tensor(torch_expected["small.x"])).numpy()
    np.testing.assert_allclose(y, torch_expected["small.y"], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_torch_resnet18_checkpoint_gives_torch_logits(tmp_path):
    torch = pytest.importorskip("torch")
    from tests.eager.foreign_models import ResNet18, torch_resnet18

    torch.manual_seed(0)
    ref = torch_resnet18(num_classes=10).eval()
    torch.save(ref.state_dict(), tmp_path / "resnet18.pt")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = ref(x).numpy()
    net = ResNet18(num_classes=10)
    net.load_state_dict(eg.load(tmp_path / "resnet18.pt"))
    net.eval()
    np.testing.assert_allclose(net(eg.tensor(x.numpy())).numpy(), want, rtol=1e-4, atol=1e-4)


# ----- safetensors -------------------------------------------------------------------------------
def test_safetensors_round_trip_chosen_by_suffix_or_format(tmp_path):
    state = {"w": eg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)),
             "b": np.array([1.5, -2.0], jnp.bfloat16), "i": eg.tensor([1, 2, 3]),
             "h": np.array([0.5], np.float16), "m": np.array([True])}
    eg.save(state, tmp_path / "x.safetensors")
    buf = io.BytesIO()
    eg.save(state, buf, format="safetensors")
    assert (tmp_path / "x.safetensors").read_bytes() == buf.getvalue()
    (tmp_path / "renamed.bin").write_bytes(buf.getvalue())  # told by content, not by name
    for got in (eg.load(tmp_path / "x.safetensors"), eg.load(tmp_path / "renamed.bin")):
        assert sorted(got) == sorted(state) and all(type(v) is eg.Tensor for v in got.values())
        for k, v in state.items():
            assert got[k].dtype == _np(v).dtype, k
            np.testing.assert_array_equal(got[k].numpy().astype(np.float32),
                                          _np(v).astype(np.float32), err_msg=k)


def test_safetensors_state_dict_loads_into_a_module(convnet, tmp_path):
    saved = convnet.state_dict()
    eg.save(saved, tmp_path / "net.safetensors")
    convnet.load_state_dict({k: np.zeros_like(v) for k, v in saved.items()})
    convnet.load_state_dict(eg.load(tmp_path / "net.safetensors"))
    for k, v in convnet.state_dict().items():
        np.testing.assert_array_equal(v, saved[k], err_msg=k)


@pytest.mark.parametrize("obj", [{"a": {"b": np.ones(2)}}, {"n": 3}, [np.ones(2)], {1: np.ones(1)}])
def test_safetensors_refuses_what_it_cannot_hold_and_keeps_the_old_file(obj, tmp_path):
    path = tmp_path / "x.safetensors"
    eg.save({"w": np.ones(2, np.float32)}, path)
    with pytest.raises(TypeError, match="safetensors"):
        eg.save(obj, path)
    assert list(eg.load(path)) == ["w"]


def test_save_refuses_an_unknown_format(tmp_path):
    with pytest.raises(ValueError, match="'eager' or 'safetensors'"):
        eg.save({}, tmp_path / "x", format="pickle")


def test_a_corrupt_safetensors_file_raises_checkpoint_error(tmp_path):
    header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    path = tmp_path / "bad.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(eg.CheckpointError, match="bad.safetensors"):
        eg.load(path)


@pytest.mark.slow  # importing torch takes seconds
def test_safetensors_interoperate_with_torch(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    st.save_file({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)},
                 tmp_path / "t.safetensors")
    got = eg.load(tmp_path / "t.safetensors")
    np.testing.assert_array_equal(got["w"].numpy(), np.arange(6.0).reshape(2, 3))
    assert got["b"].dtype == jnp.bfloat16
    eg.save(got, tmp_path / "e.safetensors")
    back = st.load_file(tmp_path / "e.safetensors")
    assert back["b"].dtype == torch.bfloat16 and back["w"].shape == (2, 3)
