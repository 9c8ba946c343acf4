"""What the zoo's quantization parity tests (`test_zoo_qat.py`, `test_zoo_int8.py`) share: when
they can run (MegEngine 1.13 and the zoo's quantization family), their marks, and running one
side of a comparison (MegEngine's or this project's) in a subprocess of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INTERPRETER = os.environ.get("MEGENGINE_PYTHON")
MODELS = os.environ.get("MEGENGINE_MODELS")
MODEL_NAMES = ("resnet18", "shufflenet_v1_x1_5_g3", "mobilenet_v2")


def _skip_reason() -> str | None:
    if not INTERPRETER:
        return "set MEGENGINE_PYTHON to an interpreter with MegEngine 1.13 (see test_zoo.py)"
    if not MODELS or not (Path(MODELS) / "official" / "quantization").is_dir():
        return "set MEGENGINE_MODELS to a checkout of MegEngine's model zoo (MegEngine/Models)"
    return None


MARKS = [pytest.mark.parity, pytest.mark.slow,
         pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


def run_side(runner: str, python: str, side: str, name: str, work: Path, out: Path) -> None:
    """Run `runner` (a script beside this file) as `side` for model `name` under `python`,
    writing `out`; fail with its stderr if it fails."""
    env = {**os.environ, "MEGENGINE_MODELS": str(Path(MODELS or "").expanduser().resolve())}
    done = subprocess.run([python, str(HERE / runner), side, name, str(work), str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"{name}: {side} runner failed:\n{done.stderr[-3000:]}"
