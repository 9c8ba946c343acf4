"""The persistent cache as a user meets it, each run a fresh process: on by default in a private
per-user directory; a second run compiles nothing it could have loaded; a damaged entry at any
offset (header, digest, payload, last byte), ours or jax's, is refused and compiled again
instead of killing the process; `PARTIAL_CACHE_DIR=` turns it off; `python -m partial.cache`
shows and clears it."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A small training script with every kind of compiled code: eager ops (forward and backward), a
# partial_trace region joining the tape, an xla_trace step. Prints its losses and the cache's
# counts for the run.
TRAIN = """
import json
import numpy as np
import eager as eg, eager.functional as F, eager.module as M
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
import xla_segments
eg.random.seed(0)
net = M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 4))
head = M.Linear(4, 4)
gm = GradManager().attach(net.parameters() + head.parameters())
opt = eg.optimizer.SGD(net.parameters() + head.parameters(), lr=0.1, momentum=0.9)
backbone = partial_trace(net)
@xla_trace
def step(x, y):
    with gm:
        loss = F.loss.square_loss(head(net(x)), y)
        gm.backward(loss)
    opt.step().clear_grad()
    return loss
x = eg.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
y = eg.tensor(np.zeros((2, 4), np.float32))
losses = []
for _ in range(2):
    with gm:
        loss = (F.relu(head(backbone(x))) ** 2).mean()
        gm.backward(loss)
    opt.step().clear_grad()
    losses += [loss.item(), step(x, y).item()]
print(json.dumps({"losses": losses, "dir": xla_segments.cache_dir(),
                  **xla_segments.cache_counts()}))
"""


def train(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", TRAIN], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture
def env(tmp_path):
    """A process environment whose default cache location is `tmp_path/home`."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PARTIAL_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    return {**clean, "XDG_CACHE_HOME": str(tmp_path / "home")}


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A cache filled by one run of the script, and that run's report."""
    home = tmp_path_factory.mktemp("filled")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PARTIAL_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    first = train({**clean, "XDG_CACHE_HOME": str(home)})
    return Path(first["dir"]), first


def test_on_by_default_in_a_private_per_user_directory(filled):
    directory, first = filled
    assert directory.name == "partial-trace"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert directory.stat().st_uid == os.geteuid()
    assert first["compiles"] > 0 and (directory / "eager-ops").is_dir()
    assert (directory / "segments").is_dir()


def test_a_second_run_compiles_nothing_it_could_have_loaded(filled, tmp_path):
    directory, first = filled
    copy = tmp_path / "cache"
    subprocess.run(["cp", "-r", str(directory), str(copy)], check=True)
    second = train({**os.environ, "PARTIAL_CACHE_DIR": str(copy)})
    # what jax reports as a backend compile and was not a load from its own cache: none
    assert second["compiles"] == 0, second
    assert second["loaded"] > 0
    assert second["losses"] == first["losses"]  # exactly


@pytest.mark.parametrize("where", ["header", "digest", "payload", "trailing"])
def test_a_damaged_cache_never_runs(filled, tmp_path, where):
    """One bit flipped in every file of the cache (this project's entries and jax's): the next
    run refuses them, compiles again and trains the same. Unverified, such files killed the
    process (SIGILL, SIGSEGV, an abort in XLA's loader)."""
    directory, first = filled
    copy = tmp_path / "cache"
    subprocess.run(["cp", "-r", str(directory), str(copy)], check=True)
    damaged = 0
    for path in copy.rglob("*"):
        if not path.is_file() or path.name == "runs.jsonl":
            continue
        data = bytearray(path.read_bytes())
        at = {"header": 2, "digest": 12, "payload": len(data) // 2,
              "trailing": len(data) - 1}[where]
        data[at] ^= 0x10
        path.write_bytes(bytes(data))
        damaged += 1
    assert damaged > 10
    again = train({**os.environ, "PARTIAL_CACHE_DIR": str(copy)})
    assert again["losses"] == first["losses"]
    assert again["compiles"] > 0  # compiled anew, not loaded
    healed = train({**os.environ, "PARTIAL_CACHE_DIR": str(copy)})
    assert healed["compiles"] == 0 and healed["losses"] == first["losses"]


def test_an_empty_variable_turns_it_off(env, tmp_path):
    off = train({**env, "PARTIAL_CACHE_DIR": ""})
    assert off["dir"] is None and off["loaded"] == 0
    assert not (tmp_path / "home").exists()


def test_a_directory_others_can_write_to_is_refused(env, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    done = subprocess.run([sys.executable, "-c", "import partial"], cwd=ROOT, capture_output=True,
                          env={**env, "PARTIAL_CACHE_DIR": str(shared)}, text=True, timeout=120)
    assert done.returncode != 0
    assert "can be written by other users" in done.stderr and "PARTIAL_CACHE_DIR=" in done.stderr
    # the default location in such a place: a warning, and training goes on without a cache
    (tmp_path / "home" / "partial-trace").mkdir(parents=True)
    (tmp_path / "home" / "partial-trace").chmod(0o777)
    done = subprocess.run([sys.executable, "-W", "always", "-c", TRAIN], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "CacheWarning" in done.stderr and json.loads(done.stdout.splitlines()[-1])["dir"] is None


def test_the_cache_command_shows_and_clears_it(filled, tmp_path):
    directory, _ = filled
    copy = tmp_path / "cache"
    subprocess.run(["cp", "-r", str(directory), str(copy)], check=True)
    env = {**os.environ, "PARTIAL_CACHE_DIR": str(copy)}
    show = subprocess.run([sys.executable, "-m", "partial.cache"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert show.returncode == 0, show.stderr
    assert str(copy) in show.stdout and "eager-ops/" in show.stdout
    assert "recent runs" in show.stdout and "compiled" in show.stdout
    clear = subprocess.run([sys.executable, "-m", "partial.cache", "clear"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert clear.returncode == 0 and "removed" in clear.stdout
    assert copy.is_dir() and not any(copy.iterdir())
