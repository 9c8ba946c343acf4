"""The data-parallel example: 2 processes train the digits demo's CNN in the per-rank style, end
with identical parameters, reach a sensible accuracy, and rank 0's checkpoint holds them."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import eager as eg

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import data_parallel  # noqa: E402


@pytest.mark.slow
def test_two_processes_train_to_identical_parameters_and_save_them(tmp_path):
    out = tmp_path / "model.eg"
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "data_parallel.py"), "--procs", "2", "--epochs", "2",
         "--out", str(out)],
        capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    digests = dict(re.findall(r"rank (\d) parameters sha256 ([0-9a-f]{64})", run.stdout))
    assert sorted(digests) == ["0", "1"], run.stdout
    assert digests["0"] == digests["1"]
    assert "parameters identical on all ranks" in run.stdout
    accuracy = float(re.search(r"final test accuracy ([0-9.]+)", run.stdout).group(1))
    assert accuracy >= 0.85  # 0.928 after 2 epochs (the demo alone: 0.98 after 4)
    assert re.search(r"[0-9.]+ steps/s", run.stdout)
    assert data_parallel.state_digest(eg.load(str(out))) == digests["0"]
