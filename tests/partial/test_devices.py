"""Placement: entries are keyed by the devices of the tensor arguments, and each runs where its
inputs live. Runs in a child process with two host devices (XLA_FLAGS must be set before jax
starts)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import numpy as np
import eager as eg
from eager.autodiff import GradManager
from partial import partial_trace

w = eg.Parameter([1.0, 2.0, 3.0], )
f = partial_trace(lambda x: (x * 2).sum())
a = eg.tensor([1.0, 2.0, 3.0], device="cpu0")
b = eg.tensor([1.0, 2.0, 3.0], device="cpu1")
for x in (a, b, a, b):
    y = f(x)
    assert y.item() == 12.0 and y.device == x.device, (y.device, x.device)
info = f.cache_info()
assert (info.captures, info.hits) == (2, 2), info

p = eg.Parameter(np.ones(3, np.float32), device="cpu1")
g = partial_trace(lambda x: (x * p).sum())
gm = GradManager().attach([p])
with gm:
    gm.backward(g(eg.tensor([1.0, 2.0, 3.0], device="cpu1")))
assert p.grad.device == "cpu1" and p.grad.numpy().tolist() == [1.0, 2.0, 3.0]

# A Python float argument of a region with breaks is an input with its placement on every
# call, as in the first call's capture: a new value does not compile anew.
@partial_trace(graph_breaks=True)
def h(x, k):
    y = x * k
    return y if y.sum() > 0 else -y
assert h(a, 2.0).numpy().tolist() == [2.0, 4.0, 6.0]
assert h(a, 3.0).numpy().tolist() == [3.0, 6.0, 9.0]
info = h.cache_info()
assert (info.captures, info.hits) == (1, 1), info
print("ok")
"""


def test_entries_are_keyed_and_placed_by_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
