"""The zoo's quantization scripts (`official/quantization`), run unchanged on this project.

Each script runs in its own process through `python -m partial.run_megengine --shadow`, from the
quantization folder as its README says, with the arguments that run it on the CPU (`-n 1`: one
process, no GPU asked for; `-w 0`: the DataLoader reads in the process) on a tiny random
ImageNet-layout folder made here: `train/` 32 PNGs of 16x16 pixels in 3 class folders (ResNet's
batch of 32, which the scripts' `RandomSampler(drop_last=True)` needs at least), `val/` 100 (the
scripts' validation batch of 100, which MegEngine's `SequentialSampler` refuses to exceed) and an
empty `ILSVRC2012_devkit_t12/`, which MegEngine's `ImageNet` requires. The scripts resize and
crop every image to 224x224, so the models see ImageNet's shapes.

- `train.py --mode qat` and `--mode normal`, and `finetune.py` (from a float checkpoint) loop for
  `cfg.EPOCHS` epochs of 1,280,000 / batch steps and save their first checkpoint at step 10000:
  they never end here. The test reads their log as they run (`--report-freq 1` logs every
  step) and stops the process (SIGTERM) once it logged `STEPS` training steps, then checks that
  the losses are finite and that training moved them.
- `calibration.py` (from the float checkpoint; its evaluation stops by itself after
  `--report-freq` batches, and the 100 validation images are one) calibrates, saves
  `checkpoint-calibration.pkl`, converts the model to int8 with `quantize` and evaluates it.
- `test.py` evaluates the calibrated checkpoint in `--mode qat` and `--mode quantized`.
- `inference.py --mode quantized --dump` traces the int8 model, dumps it and prints the top 5
  classes. It reads `official/assets/cat.jpg` and `imagenet_class_info.json`, which the zoo's
  copy here does not hold, next to the script (`os.path.realpath(__file__)`), so it runs from a
  copy of the quantization folder (its files unchanged) beside an `assets/` made here; the dump
  is then loaded with `partial.load` and its top class compared with the script's.

The float checkpoint is written by a three-line script run the same way (`models.resnet18()`'s
`state_dict`, `mge.save`). Only ResNet-18 (the scripts' default) runs: a step of ShuffleNet or
MobileNet here trains a batch of 128 (`ShufflenetConfig`), four times as long on a CPU. Slow (a
few minutes); needs `MEGENGINE_MODELS` but not MegEngine.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = os.environ.get("MEGENGINE_MODELS")
QUANT = Path(MODELS).expanduser().resolve() / "official" / "quantization" if MODELS else None
STEPS = 3
TIMEOUT = 900  # seconds for one script: a ResNet-18 step at batch 32 takes ~15 s on 2 cores
CPU = ["-n", "1", "-w", "0", "--report-freq", "1"]

pytestmark = [
    pytest.mark.parity, pytest.mark.slow,
    pytest.mark.skipif(QUANT is None or not (QUANT / "train.py").is_file(),
                       reason="MEGENGINE_MODELS (a checkout of MegEngine's model zoo, with "
                              "official/quantization) is not set"),
]

MAKE_CHECKPOINT = """
import sys
import megengine as mge
import models  # the zoo's quantization models: the script runs from their folder
mge.save({"step": 0, "state_dict": models.resnet18().state_dict()}, sys.argv[1])
"""


def _command(script: Path | str, *args: str) -> list[str]:
    return [sys.executable, "-m", "partial.run_megengine", "--shadow", str(script), *args]


def _env() -> dict[str, str]:
    # the project first on the path: the scripts' folder is the working directory
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}


def _run(cwd: Path, script: Path | str, *args: str) -> str:
    """Run a script to its end; its output (stdout and the log on stderr)."""
    done = subprocess.run(_command(script, *args), cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{script} {args} failed:\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def _train_steps(script: str, *args: str) -> list[float]:
    """Run a training script until it logged `STEPS` steps, stop it, and return their losses."""
    proc = subprocess.Popen(_command(script, *args), cwd=QUANT, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    timer = threading.Timer(TIMEOUT, proc.kill)  # a hung script fails the test, not CI
    timer.start()
    losses: list[float] = []
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            found = re.search(r"TRAIN e0 (\d+) \S+ Loss (\S+)", line)
            if found:
                losses.append(float(found.group(2)))
                if len(losses) == STEPS:
                    break
    finally:
        timer.cancel()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert len(losses) == STEPS, f"{script} {args} stopped early:\n{''.join(lines)[-4000:]}"
    return losses


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny dataset, the float checkpoint and a folder for the scripts' saves."""
    work = tmp_path_factory.mktemp("quantization")
    import cv2

    rng = np.random.RandomState(0)
    for split, count in (("train", 32), ("val", 100)):
        for i in range(count):
            folder = work / "data" / split / f"n0{i % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(folder / f"{i}.png"), rng.randint(0, 256, (16, 16, 3), np.uint8))
    (work / "data" / "ILSVRC2012_devkit_t12").mkdir()
    (work / "make_checkpoint.py").write_text(MAKE_CHECKPOINT)
    _run(QUANT, work / "make_checkpoint.py", str(work / "float.pkl"))
    return work


def _finite_and_moving(losses: list[float]) -> None:
    assert all(math.isfinite(loss) for loss in losses), losses
    assert len(set(losses)) > 1, losses  # the steps trained something


@pytest.mark.parametrize("mode", ["qat", "normal"])
def test_train(work: Path, mode: str) -> None:
    losses = _train_steps("train.py", "-a", "resnet18", "-d", str(work / "data"),
                          "-s", str(work / "save"), "--mode", mode, *CPU)
    _finite_and_moving(losses)
    assert (work / "save" / f"resnet18.{mode}" / "log.txt").read_text().count("TRAIN") >= 1


def test_finetune(work: Path) -> None:
    losses = _train_steps("finetune.py", "-a", "resnet18", "-d", str(work / "data"),
                          "-s", str(work / "save"), "-c", str(work / "float.pkl"), *CPU)
    _finite_and_moving(losses)


@pytest.fixture(scope="module")
def calibrated(work: Path) -> Path:
    out = _run(QUANT, "calibration.py", "-a", "resnet18", "-d", str(work / "data"),
               "-s", str(work / "save"), "-c", str(work / "float.pkl"), *CPU)
    losses = [float(x) for x in re.findall(r"Step 0, Loss (\S+)", out)]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), out[-3000:]
    assert "TEST " in out
    return work / "save" / "resnet18.calibration" / "checkpoint-calibration.pkl"


def test_calibration(calibrated: Path) -> None:
    assert calibrated.is_file()


@pytest.mark.parametrize("mode", ["qat", "quantized"])
def test_test(work: Path, calibrated: Path, mode: str) -> None:
    out = _run(QUANT, "test.py", "-a", "resnet18", "-d", str(work / "data"), "-c",
               str(calibrated), "--mode", mode, *CPU)
    loss = re.search(r"Step 0, Loss (\S+)", out)
    assert loss and math.isfinite(float(loss.group(1))) and "TEST " in out, out[-3000:]


def test_inference_dumps_the_int8_model(work: Path, calibrated: Path) -> None:
    import cv2

    copy = work / "official" / "quantization"
    shutil.copytree(QUANT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for folder, _, _ in os.walk(copy):  # a read-only checkout's modes came with it
        os.chmod(folder, 0o755)
    assets = work / "official" / "assets"
    assets.mkdir()
    cat = np.random.RandomState(1).randint(0, 256, (300, 280, 3), np.uint8)
    cv2.imwrite(str(assets / "cat.jpg"), cat)
    (assets / "imagenet_class_info.json").write_text(
        "{" + ", ".join(f'"{i}": ["n{i:08d}", "class_{i}"]' for i in range(1000)) + "}")
    out = _run(copy, "inference.py", "-a", "resnet18", "-c", str(calibrated),
               "--mode", "quantized", "--dump")
    top = re.findall(r"(\d): class = class_(\d+)\s+with probability = +(\S+) %", out)
    assert [int(rank) for rank, _, _ in top] == [0, 1, 2, 3, 4], out[-3000:]
    assert (copy / "resnet18.quantized.pkl").is_file()
    _check_dump(copy / "resnet18.quantized.megengine", cv2.imread(str(assets / "cat.jpg")),
                int(top[0][1]))


def _check_dump(path: Path, image: np.ndarray, top_class: int) -> None:
    """The dumped program, loaded here, gives the script's top class on its input."""
    import eager.data.transform as T
    import partial

    transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.Normalize(mean=128),
                           T.ToMode("CHW")])
    data = transform.apply(image)[np.newaxis].astype(np.float32)
    probs = np.asarray(partial.load(path)(data).numpy())
    assert probs.shape == (1, 1000) and abs(float(probs.sum()) - 1) < 1e-3
    assert int(probs.argmax()) == top_class
