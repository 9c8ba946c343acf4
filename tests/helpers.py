"""Small helpers shared by the test files: seeded random inputs, a labelled batch, the training
step a user writes, and hypothesis example counts relative to the active profile.

Import them as `from tests.helpers import randn, ...`. Larger shared pieces have files of their
own: `tests/partial/differential.py` runs a program eagerly and compiled and compares what a user
can observe; `tests/eager/op_check.py` checks eager values and gradients against a reference;
`tests/eager/references.py` holds the references and op tables several test files use.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis.errors import InvalidArgument

import eager as eg


# ----- random inputs ----------------------------------------------------------------------------
def randn_array(*shape: int, seed: Any = 0, dtype: Any = np.float32) -> np.ndarray:
    """Standard-normal values of `shape` from a new generator seeded with `seed` (anything
    `np.random.default_rng` takes), as a numpy array of `dtype`."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def randn(*shape: int, seed: Any = 0, dtype: Any = np.float32) -> eg.Tensor:
    """`randn_array(*shape, seed=seed, dtype=dtype)` as a Tensor."""
    return eg.tensor(randn_array(*shape, seed=seed, dtype=dtype))


def normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    """The next standard-normal draws of `rng` (a test's `rng` fixture), times `scale`, as a
    float32 array of `shape`."""
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def labelled_batch(seed: Any, shape: tuple[int, ...] = (6, 8),
                   classes: int = 4) -> tuple[eg.Tensor, eg.Tensor]:
    """A classification batch from one generator seeded with `seed`: standard-normal float32
    inputs of `shape`, then `shape[0]` int32 labels below `classes`."""
    rng = np.random.default_rng(seed)
    return (eg.tensor(rng.standard_normal(shape).astype(np.float32)),
            eg.tensor(rng.integers(0, classes, shape[0]).astype(np.int32)))


# ----- training ---------------------------------------------------------------------------------
def training_step(gm: Any, opt: Any, loss_of: Callable[[], eg.Tensor]) -> eg.Tensor:
    """One training step as a user writes it: the loss `loss_of()` recorded by the GradManager
    `gm`, its backward, then `opt.step().clear_grad()`. Returns the loss.

    Call it inside the step function a test compiles, never compile it directly: every wrapper
    of one function's code shares one cache, so tests compiling this function would share
    entries and cache statistics."""
    with gm:
        loss = loss_of()
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


# ----- hypothesis -------------------------------------------------------------------------------
def examples(ci: int) -> settings:
    """Settings drawing `ci` examples under the default "ci" profile and proportionally more
    under a larger one (at least one); everything else as the active profile says
    (`tests/conftest.py` registers the profiles). For a property whose examples cost much more,
    or much less, than a typical one's."""
    try:
        base = settings.get_profile("ci").max_examples
    except InvalidArgument:  # imported outside pytest: tests/conftest.py registered nothing
        base = settings.default.max_examples
    return settings(max_examples=max(1, round(ci * settings.default.max_examples / base)))


def computed_once(tmp_path_factory: Any, worker_id: str, name: str, compute: Callable[[], Any]
                  ) -> Any:
    """`compute()`, run by one pytest-xdist worker of the session and its result shared with the
    others through a file: a module-scoped fixture runs again in every worker that is given one
    of its tests, which for a launch of processes or a fresh process of virtual devices is
    minutes of CPU each time. Outside xdist, `compute()` itself. (The pickle is this session's
    own result, in this session's temporary folder.)"""
    if worker_id == "master":
        return compute()
    root = tmp_path_factory.getbasetemp().parent  # the session's folder, shared by its workers
    path = root / f"{name}.pickle"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here while one computes
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value


ROOT = Path(__file__).resolve().parents[1]


def fresh_env() -> dict[str, str]:
    """This environment without `XLA_FLAGS`, which may force the parent's device count: a
    child process picks its own (`jax_num_cpu_devices`)."""
    return {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}


def json_of_module(module: str, *args: str, timeout: float) -> Any:
    """What `python -m module args` prints as JSON, run in a fresh process at the repository's
    root (a fresh process for jax to start with another number of devices)."""
    done = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=fresh_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def trained_with_threads(code: str, out: Path, threads: str, timeout: float,
                         **env: str) -> dict[str, Any]:
    """Run the training script `code` (which saves its arrays to `out` and prints
    `{"threads": n}`) in a new process with `threads` compile threads; its arrays by name."""
    import numpy as np

    environ = dict(os.environ, PARTIAL_COMPILE_THREADS=threads, JAX_PLATFORMS="cpu", **env)
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"threads": int(threads)}
    return dict(np.load(out))
