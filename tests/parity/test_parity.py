"""This project against real MegEngine 1.13: every case of `cases.py` run on both sides and
compared on values (and gradients, training curves, state dicts), dtypes, shapes and on whether
it raises.

Runs when `MEGENGINE_PYTHON` names an interpreter that has MegEngine 1.13 (`.ci/run` makes one
where Python 3.10 is available):

    "$(pyenv root)"/versions/3.10.13/bin/python -m venv .venv-megengine
    .venv-megengine/bin/pip install megengine==1.13.0 "numpy<1.24"
    MEGENGINE_PYTHON=.venv-megengine/bin/python python -m pytest -m parity

Skipped, with that reason, otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.parity import cases

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INTERPRETER = os.environ.get("MEGENGINE_PYTHON")

pytestmark = [
    pytest.mark.parity,
    pytest.mark.skipif(not INTERPRETER, reason="set MEGENGINE_PYTHON to an interpreter with "
                       "MegEngine 1.13 to compare against it (see this module's docstring)"),
]


def _side(python: str, side: str, tmp: Path) -> dict[str, Any]:
    out = tmp / f"{side}.json"
    done = subprocess.run([python, str(HERE / "runner.py"), side, str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{side} runner failed:\n{done.stderr[-3000:]}"
    return json.loads(out.read_text())


def _repeated_side(python: str, tmp: Path, runs: int = 5) -> dict[str, Any]:
    """MegEngine's results, each case's the value most of `runs` runs give (among equally
    frequent values, the earliest run's).

    MegEngine 1.13's CPU kernels sometimes read memory they never wrote: in about one run in
    thirty (7 of 300 steps of its network, measured), the gradient of a (1, C, 1, 1) parameter
    (a depthwise convolution's bias, PReLU's weight) in
    `grouped_weights_and_prelu_in_megengine_shapes` is off by 0.1 or by 1e24 (its one-layer
    RNN's backward is worse, wrong in 4 of 12 fresh processes: `recurrent_flat_gradient` checks
    it through a reference, `megengine_unreliable`). One run of the reference is
    then a coin with a bad side, and so was taking the first value two runs agree on: two
    garbage runs can agree (a NaN result is encoded with its mask of non-finite entries, so
    equal masks compare equal). MegEngine's side runs `runs` times (a fresh process each: 4-7 s
    here) and each case takes its most frequent value. A case that never repeats (its own draws,
    a temporary path in a message, a kept MegEngine bug) is compared on its first run, as one
    run would be."""
    seen: list[dict[str, Any]] = []
    for i in range(runs):
        (tmp / f"run{i}").mkdir()
        seen.append(_side(python, "megengine", tmp / f"run{i}"))
    chosen = {}
    for name in seen[0]:
        values = [run[name] for run in seen if name in run]
        chosen[name] = max(values, key=lambda v: sum(v == w for w in values))  # (first of ties)
    return chosen


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("parity")
    return {"megengine": _repeated_side(str(Path(INTERPRETER).expanduser()), tmp),
            "project": _side(sys.executable, "project", tmp)}


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "array" in value:
        array = np.array(value["array"], dtype=value["dtype"]).reshape(value["shape"])
        if value.get("nonfinite") is not None:
            array = np.where(np.array(value["nonfinite"], bool).reshape(array.shape),
                             np.nan, array).astype(value["dtype"])
        return array
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _compare(ours: Any, theirs: Any, where: str, rtol: float, atol: float) -> None:
    if isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{where}: an array in MegEngine, {ours!r} here"
        assert ours.dtype == theirs.dtype, f"{where}: dtype {ours.dtype}, MegEngine {theirs.dtype}"
        assert ours.shape == theirs.shape, f"{where}: shape {ours.shape}, MegEngine {theirs.shape}"
        if theirs.dtype.kind in "fc":
            np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=where)
        else:
            np.testing.assert_array_equal(ours, theirs, err_msg=where)
    elif isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs), \
            f"{where}: keys {sorted(ours) if isinstance(ours, dict) else ours}, " \
            f"MegEngine {sorted(theirs)}"
        for k in theirs:
            _compare(ours[k], theirs[k], f"{where}.{k}", rtol, atol)
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), \
            f"{where}: {ours!r}, MegEngine {theirs!r}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _compare(a, b, f"{where}[{i}]", rtol, atol)
    elif isinstance(theirs, float):
        assert ours == pytest.approx(theirs, rel=rtol, abs=atol), f"{where}: {ours} vs {theirs}"
    else:
        assert ours == theirs, f"{where}: {ours!r}, MegEngine {theirs!r}"


@pytest.mark.parametrize("name", sorted(cases.load_all()))
def test_case_agrees_with_megengine(results, name):
    theirs, ours = results["megengine"][name], results["project"][name]
    options = cases.OPTIONS[name]
    if options["megengine_bug"] and "raised" in theirs:  # the defect is that it raises
        assert "value" in ours, f"{name}: raised {ours['raised']}: {ours['message']}"
        _matches_reference(name, _decode(ours["value"]), options)
        return
    if "raised" in theirs:  # the exception classes differ by design: this project's own
        assert "raised" in ours, f"{name}: MegEngine raised {theirs['raised']}: " \
            f"{theirs['message']}; here it returned {ours.get('value')!r:.300}"
        return
    assert "value" in ours, f"{name}: raised {ours['raised']}: {ours['message']}"
    if options["megengine_bug"]:
        _check_bug(name, _decode(ours["value"]), _decode(theirs["value"]), options)
        return
    if options["megengine_unreliable"]:
        _check_unreliable(name, _decode(ours["value"]), _decode(theirs["value"]), options)
        return
    _compare(_decode(ours["value"]), _decode(theirs["value"]), name, options["rtol"],
             options["atol"])


def _check_bug(name: str, ours: dict, theirs: dict, options: dict) -> None:
    """A MegEngine defect kept as evidence: ours matches the reference, MegEngine's does not."""
    _matches_reference(name, ours, options)
    try:
        _compare(theirs["got"], theirs["want"], name, options["rtol"], options["atol"])
    except AssertionError:
        return
    pytest.fail(f"{name}: MegEngine now agrees with the reference; its bug "
                f"({options['megengine_bug']}) is fixed: make this an ordinary case")


def _check_unreliable(name: str, ours: dict, theirs: dict, options: dict) -> None:
    """A MegEngine value that is right in some runs only: ours matches the reference made from
    our own forward, and that reference matches MegEngine's, made from its forward."""
    _matches_reference(name, ours, options)
    _compare(ours["want"], theirs["want"], f"{name} (the references)", options["rtol"],
             options["atol"])


def _matches_reference(name: str, ours: dict, options: dict) -> None:
    """This project's `got` against the independent reference `want` its case computed."""
    _compare(ours["got"], ours["want"], f"{name} (this project against the reference)",
             options["rtol"], options["atol"])


def test_an_unreliable_megengine_value_is_checked_through_its_reference():
    """MegEngine's garbage `got` is not compared; a `got` off its reference or references
    that disagree fail."""
    options = {"rtol": 1e-3, "atol": 1e-3}
    right = {"got": np.ones(3, "f4"), "want": np.ones(3, "f4")}
    _check_unreliable("c", right, {"got": np.full(3, 1e30, "f4"), "want": np.ones(3, "f4")},
                      options)
    with pytest.raises(AssertionError, match="against the reference"):
        _check_unreliable("c", {"got": np.zeros(3, "f4"), "want": np.ones(3, "f4")}, right,
                          options)
    with pytest.raises(AssertionError, match="the references"):
        _check_unreliable("c", right, {"got": np.ones(3, "f4"), "want": np.zeros(3, "f4")},
                          options)


def test_a_reference_run_that_reads_stray_memory_is_outvoted(tmp_path, monkeypatch):
    """The run that disagrees with two others loses; one that never repeats keeps run 1."""
    runs = iter([{"flaky": 1e24, "drawn": 0.1, "steady": 1},
                 {"flaky": 0.5, "drawn": 0.2, "steady": 1},
                 {"flaky": 0.5, "drawn": 0.3, "steady": 1}])
    monkeypatch.setattr(sys.modules[__name__], "_side", lambda *args: next(runs))
    assert _repeated_side("python", tmp_path, runs=3) == {"flaky": 0.5, "drawn": 0.1,
                                                          "steady": 1}


# MegEngine loads an optimizer state written here and takes the next step from it: the two
# optimizers' state dicts share one layout (MegEngine's group keys, a float32 step). JSON
# carries it (the two sides' numpy pickles differ).
_RESUME = """
import json, sys
import numpy as np
import megengine as mge
import megengine.optimizer as optim

def decode(v):
    if isinstance(v, dict) and "array" in v:
        return np.array(v["array"], dtype=v["dtype"]).reshape(v["shape"])
    if isinstance(v, dict):
        return {(int(k) if k.isdigit() else k): decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v

saved = json.load(open(sys.argv[1]))
out = {}
for name, state in saved["states"].items():
    params = [mge.Parameter(np.array(a, "float32")) for a in saved["start"]]
    opt = {"sgd": lambda p: optim.SGD(p, lr=0.1), "momentum": lambda p: optim.SGD(p, lr=0.1,
           momentum=0.9), "adam": lambda p: optim.Adam(p, lr=0.1)}[name](params)
    state = decode(state)
    for g in state["param_groups"]:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    opt.load_state_dict(state)
    for p, g in zip(params, saved["grads"]):
        p.grad = mge.tensor(np.array(g, "float32"))
    opt.step()
    out[name] = [p.numpy().tolist() for p in params]
json.dump(out, open(sys.argv[2], "w"))
"""


def test_megengine_resumes_from_this_projects_optimizer_state(tmp_path):
    """Two steps here, the state saved; from the same starting parameters, one step in
    MegEngine from that state and one here give the same parameters."""
    import eager as eg
    import eager.optimizer as optim
    from tests.parity.runner import encode

    rng = np.random.default_rng(0)
    start = [rng.standard_normal((3, 2)).astype("float32"), rng.standard_normal(3).astype("f4")]
    grads = [rng.standard_normal(a.shape).astype("float32") for a in start]
    makers = {"sgd": lambda p: optim.SGD(p, lr=0.1),
              "momentum": lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: optim.Adam(p, lr=0.1)}

    def step(opt, params):
        for p, g in zip(params, grads):
            p.grad = eg.tensor(g)
        opt.step()

    states = {}
    for name, make in makers.items():
        params = [eg.Parameter(a) for a in start]
        opt = make(params)
        step(opt, params)
        step(opt, params)
        states[name] = opt.state_dict()
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps({"states": encode(states), "start": [a.tolist() for a in start],
                                 "grads": [g.tolist() for g in grads]}))
    script, result = tmp_path / "resume.py", tmp_path / "out.json"
    script.write_text(_RESUME)
    done = subprocess.run([str(Path(INTERPRETER).expanduser()), str(script), str(saved),
                           str(result)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(result.read_text())
    # MegEngine writes no entries for plain SGD and then fails to load its own file (KeyError 0
    # in its load_state_dict); it loads this project's, which has an empty entry per parameter
    assert states["sgd"]["state"] == {0: {}, 1: {}}
    for name, make in makers.items():
        params = [eg.Parameter(a) for a in start]
        opt = make(params)
        opt.load_state_dict(states[name])
        step(opt, params)
        for got, want in zip(params, theirs[name]):
            np.testing.assert_allclose(got.numpy(), np.array(want, "float32"), rtol=1e-5,
                                       atol=1e-6, err_msg=name)
