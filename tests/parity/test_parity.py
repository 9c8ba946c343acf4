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


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("parity")
    return {"megengine": _side(str(Path(INTERPRETER).expanduser()), "megengine", tmp),
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
    if "raised" in theirs:  # the exception classes differ by design: this project's own
        assert "raised" in ours, f"{name}: MegEngine raised {theirs['raised']}: " \
            f"{theirs['message']}; here it returned {ours.get('value')!r:.300}"
        return
    assert "value" in ours, f"{name}: raised {ours['raised']}: {ours['message']}"
    options = cases.OPTIONS[name]
    _compare(_decode(ours["value"]), _decode(theirs["value"]), name, options["rtol"],
             options["atol"])
