"""`partial.set_cache_dir` and `PARTIAL_CACHE_DIR`: a second process loads what the first one
compiled (segments and built-in eager ops from their folders of jax's cache, by keys made
before tracing), counted by jax's monitoring events and `eager`'s own. Each process is a
fresh interpreter, since the cache is about what a new process has to compile."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import partial
from partial import CacheDirError, TraceError

ROOT = Path(__file__).resolve().parents[2]

# Counts jax's compilation-cache events over one partial_trace training step. The eager op at the
# top compiles before the cache is set, so a late `set_cache_dir` is what is exercised.
STEP = """
import json, sys
import jax.monitoring
counts = {}
def count(event, **_):
    counts[event] = counts.get(event, 0) + 1
jax.monitoring.register_event_listener(count)
import numpy as np
import eager as eg
import eager.module as M
from eager.autodiff import GradManager
import partial
(eg.tensor([1.0, 2.0]) * 3).numpy()
if len(sys.argv) > 1:
    partial.set_cache_dir(sys.argv[1])
before = dict(counts)
eg.random.seed(0)
net = M.Linear(4, 2)
gm = GradManager().attach(net.parameters())
opt = eg.optimizer.SGD(net.parameters(), lr=0.1, momentum=0.9)
backbone = partial.partial_trace(net)
with gm:
    loss = (backbone(eg.tensor(np.ones((8, 4), np.float32))) ** 2).mean()
    gm.backward(loss)
opt.step().clear_grad()
counts["loss"], counts["weight"] = loss.item(), net.weight.numpy().tolist()
print(json.dumps({k: v if k in ("loss", "weight") else v - before.get(k, 0)
                  for k, v in counts.items()}))
"""

PREFIX = "/jax/compilation_cache/"
EAGER_HITS = "/eager/persistent_cache/hits"
SEGMENT_HITS = "/partial/segment_cache/hits"


def run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`code` in a new process whose cache is off until it sets one (`PARTIAL_CACHE_DIR=`
    empty), unless `env` says otherwise."""
    clean = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    clean["PARTIAL_CACHE_DIR"] = ""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT,
                          env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120)


def step_events(*args: str, env: dict | None = None, code: str = STEP) -> dict:
    done = run(code, *args, env=env)
    assert done.returncode == 0, done.stderr
    return {k.removeprefix(PREFIX): v for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


def test_a_second_process_loads_the_step_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = step_events(str(cache))  # set_cache_dir, after jax has compiled an eager op
    assert first.get("cache_hits", 0) == 0
    assert first["cache_misses"] == first["compile_requests_use_cache"] > 0
    assert EAGER_HITS not in first
    assert SEGMENT_HITS not in first
    (jax_own,) = cache.glob("jax-*")  # jax's own entries, in a folder named for this CPU
    files = sorted(p.name for p in jax_own.iterdir())
    # the segment's forward and backward executables and the eager ops, however small
    assert any("forward" in f for f in files) and any("backward" in f for f in files), files
    assert len(files) == first["cache_misses"]
    # the eager ops' executables once more, keyed by op, attributes and argument types
    eager_ops = list((cache / "eager-ops").iterdir())
    assert eager_ops and all(p.suffix == ".bin" for p in eager_ops)

    # the segment's training forward and backward once more, keyed by the captured jaxpr
    assert len(list((cache / "segments").iterdir())) == 2

    second = step_events(env={"PARTIAL_CACHE_DIR": str(cache)})  # the environment variable
    assert second.get("cache_misses", 0) == 0  # nothing compiled anew
    # every eager op and both segment executables are loaded without tracing
    assert second[EAGER_HITS] == len(eager_ops)
    assert second[SEGMENT_HITS] == 2
    assert (second["loss"], second["weight"]) == (first["loss"], first["weight"])


# The same step with the Linear inside a region that breaks on a value read: run lazily, as
# stretches whose segments are kept by their records.
BREAKS = STEP.replace("backbone = partial.partial_trace(net)", """
def forward(x):
    h = net(x)
    if h.sum() > -1e9:  # a value read: a break
        h = h * 2
    return eg.functional.exp(h)
backbone = partial.partial_trace(forward, graph_breaks=True)""")


def test_a_second_process_loads_the_stretches_of_a_region_with_breaks(tmp_path):
    cache = tmp_path / "cache"
    first = step_events(str(cache), code=BREAKS)
    kept = len(list((cache / "segments").iterdir()))
    assert SEGMENT_HITS not in first and kept == 4  # two stretches: training forward, backward
    second = step_events(str(cache), code=BREAKS)
    assert second.get("cache_misses", 0) == 0  # nothing compiled anew
    assert second[SEGMENT_HITS] == kept  # loaded without tracing
    assert (second["loss"], second["weight"]) == (first["loss"], first["weight"])


SWITCH = """
import os, sys
import jax, jax.numpy as jnp
import partial, xla_segments.cache_location
a, b = sys.argv[1:]
jax.jit(lambda x: x + 1)(jnp.ones(3))  # before any cache: nothing written anywhere
partial.set_cache_dir(a)
jax.jit(lambda x: x * 2)(jnp.ones(3))
partial.set_cache_dir(b)
jax.jit(lambda x: x - 3)(jnp.ones(3))
partial.set_cache_dir(None)
jax.jit(lambda x: x / 4)(jnp.ones(3))
print(*(len(os.listdir(os.path.join(d, xla_segments.cache_location.jax_folder())))
        for d in (a, b)))
"""


def test_the_directory_can_change_and_none_turns_the_cache_off(tmp_path):
    done = run(SWITCH, str(tmp_path / "a"), str(tmp_path / "b"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


def test_a_path_that_cannot_be_a_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CacheDirError, match="cannot be created") as info:
        partial.set_cache_dir(blocker / "cache")
    assert isinstance(info.value, TraceError) and isinstance(info.value, OSError)
    with pytest.raises(CacheDirError, match="None to turn the cache off"):
        partial.set_cache_dir("")


def test_a_bad_environment_variable_fails_the_import_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = run("import partial", env={"PARTIAL_CACHE_DIR": str(blocker)})
    assert done.returncode != 0
    assert "CacheDirError: PARTIAL_CACHE_DIR=" in done.stderr
