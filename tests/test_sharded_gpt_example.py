"""The sharded GPT example: trained with parameters and Adam state split over 4 virtual devices,
checkpointed sharded, resumed by a fresh model, it ends where the uninterrupted run ends."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fresh_env

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sharded_gpt.py"


@pytest.mark.slow
def test_the_resumed_run_ends_where_the_uninterrupted_one_does(tmp_path):
    run = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "3", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=fresh_env())
    assert run.returncode == 0, run.stderr[-4000:]
    assert "4 devices" in run.stdout
    assert "losses equal, largest parameter difference 0.00e+00" in run.stdout, run.stdout
    whole, each = map(float, re.search(r"([0-9.]+) MiB in all, ([0-9.]+) MiB on each",
                                       run.stdout).groups())
    assert each <= 0.3 * whole
    assert (tmp_path / "3").is_dir()
