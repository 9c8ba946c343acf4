"""Preemption under the launcher: a SIGTERM to the launching process reaches every rank's
handler, each rank saves its checkpoint, and then the launcher ends as a SIGTERM ends it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import eager as eg

pytestmark = pytest.mark.slow  # three processes start

ROOT = Path(__file__).resolve().parents[2]


def _wait_for(paths: list[Path], proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not all(p.exists() for p in paths):
        if proc.poll() is not None:
            pytest.fail(f"the launch ended early:\n{proc.communicate()[1]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the ranks did not start in {seconds} s:\n{proc.communicate()[1]}")
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" in f.read()
    except FileNotFoundError:
        return True


def test_a_sigterm_to_the_launcher_reaches_every_rank_and_each_saves(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "tests.distributed.preempted", str(tmp_path)],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    _wait_for([tmp_path / "ready0", tmp_path / "ready1"], proc, 120)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err  # the launcher took its SIGTERM last
    for r in range(2):
        saved = eg.load(str(tmp_path / f"rank{r}.pkl"))
        assert saved["steps"] >= 3, saved["steps"]
        assert set(saved["model"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
        assert len(saved["optimizer"]["state"]) == 4
    pids = [int((tmp_path / f"ready{r}").read_text()) for r in range(2)]
    deadline = time.monotonic() + 10
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids), "a rank outlived the launcher"
