"""Shared fixtures: a deterministic framework seed per test, float64 for finite differences, and
one persistent compilation cache per test process; and the hypothesis profiles."""

import atexit
import gc
import os
import shutil
import tempfile
import zlib

# The cache is on by default in the user's own directory: tests never touch it. Tests build the
# same small models again and again (a stateful test's every example, each parametrization, the
# processes of every distributed launch): with a cache of their own, each distinct program
# compiles once per test worker and later ones load it. Child processes get it through
# `PARTIAL_CACHE_DIR`. Set before `partial` is imported (which applies it), since collecting
# the tests already compiles. `PARTIAL_CACHE_DIR=` (empty) runs the suite with the cache off.
if os.environ.get("PARTIAL_CACHE_DIR") != "":
    _CACHE = tempfile.mkdtemp(prefix="partial-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
    os.environ["PARTIAL_CACHE_DIR"] = _CACHE
# and a child that clears PARTIAL_CACHE_DIR gets a default directory that is not the user's
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="partial-test-home-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

import jax
import numpy as np
import pytest
from hypothesis import settings

import eager as eg
from xla_segments import compile_pool

# The differential tests compare float32 results with float64 references at float32's accuracy.
# On NVIDIA GPUs jax computes float32 matrix products and convolutions in TF32 by default (10
# bits of mantissa: errors near 1e-3), so there the tests ask for full float32 products.
if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")

# Hypothesis profiles, chosen by the environment variable HYPOTHESIS_PROFILE:
# - "ci" (the default): the same examples on every run, few of them, since most examples compile
#   new shapes (tens of milliseconds to a second each);
# - "thorough": ten times as many, new ones on every run (a failure is kept in .hypothesis/ and
#   replayed first next time), for a nightly or a pre-release run.
# A property whose examples cost much more or much less than a typical one's sets its own count
# with `tests.helpers.examples(n)`: n under "ci", ten times n under "thorough".
settings.register_profile("ci", max_examples=6, deadline=None, derandomize=True)
settings.register_profile("thorough", max_examples=60, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seeded(request):
    """Seed the framework generator from the test's name, so tests are independent of order."""
    eg.random.seed(zlib.crc32(request.node.nodeid.encode()))
    yield


@pytest.fixture
def threads(monkeypatch):
    """`threads(n)`: a compile pool of n threads for the test; the configured one after."""

    def use(n):
        monkeypatch.setenv(compile_pool.ENV, str(n))
        compile_pool.reset()

    yield use
    monkeypatch.undo()
    compile_pool.reset()


@pytest.fixture
def rng(request):
    """A numpy generator seeded from the test's name."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def x64():
    """Enable float64 for the duration of a test (finite-difference gradient checks)."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def rewrites():
    """Restores the convolution rewrites' switch after a test that flips it."""
    before = eg.conv_rewrites()
    yield
    eg.set_conv_rewrites(before)


@pytest.fixture
def frozen_gc():
    """Move every object alive now out of the collector's sight for the test, so the
    `gc.collect()` calls a test makes to free objects (and reuse their ids) scan only what the
    test creates: about a second each in a worker that has run many tests, a millisecond so."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()
