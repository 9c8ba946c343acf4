"""`megengine.save` / `megengine.load` of state dicts and nested Python values."""

import numpy as np

import eager as mge
import eager.module as M
import eager.optimizer as optim


def test_save_and_load_a_checkpoint(tmp_path):
    net = M.Linear(2, 3)
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for p in net.parameters():
        p.grad = mge.tensor(np.ones(p.shape, np.float32))
    opt.step()
    path = tmp_path / "checkpoint.pkl"
    mge.save({"epoch": 3, "state_dict": net.state_dict(), "opt": opt.state_dict()}, path)
    loaded = mge.load(path)
    assert loaded["epoch"] == 3
    other = M.Linear(2, 3)
    other.load_state_dict(loaded["state_dict"])
    np.testing.assert_array_equal(other.weight.numpy(), net.weight.numpy())
    other_opt = optim.SGD(other.parameters(), lr=1.0, momentum=0.9)
    other_opt.load_state_dict(loaded["opt"])
    assert other_opt.param_groups[0]["lr"] == 0.1


def test_nested_values_round_trip(tmp_path):
    obj = {"t": mge.tensor([1.0, 2.0]), "list": [1, "s", np.arange(3)], "n": {"x": 3.5}}
    mge.save(obj, tmp_path / "obj.mge")
    out = mge.load(tmp_path / "obj.mge")
    assert isinstance(out["t"], mge.Tensor)
    np.testing.assert_array_equal(out["t"].numpy(), [1.0, 2.0])
    assert out["list"][:2] == [1, "s"]
    np.testing.assert_array_equal(out["list"][2], np.arange(3))
    assert out["n"] == {"x": 3.5}


def test_load_with_map_location(tmp_path):
    path = tmp_path / "ckpt.mge"
    mge.save({"w": mge.tensor([1.0, 2.0]), "rest": [mge.zeros(1), 3]}, path)
    for where in ("cpu0", {"gpu0": "cpu0"}):
        got = mge.load(path, map_location=where)
        assert got["w"].device == "cpu0" and got["rest"][1] == 3
        np.testing.assert_array_equal(got["w"].numpy(), [1.0, 2.0])
