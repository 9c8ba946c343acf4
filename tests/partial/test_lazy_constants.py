"""Tensors made from plain values inside a region with graph breaks (`eg.arange`, `eg.full`,
`eg.tensor`: a detector's anchors and targets) are concrete there, so they are made as outside
any region: by the programs kept with the persistent cache, not by jax's primitive programs,
which every new process lowers and compiles again (FCOS's first lazy call: 24 of them)."""

import logging

import jax
import numpy as np
import pytest

import eager as eg
import partial
from eager.core import creation

PRIMITIVE_PROGRAMS = ("jit(iota)", "jit(broadcast_in_dim)", "jit(stage)", "jit(mul)",
                      "jit(add)")


@pytest.fixture
def compiles(caplog):
    """The names of the programs jax compiles during the test."""
    before = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    with caplog.at_level(logging.WARNING, logger="jax"):
        yield lambda: [r.getMessage().split(" with ")[0][len("Compiling "):]
                       for r in caplog.records if r.getMessage().startswith("Compiling ")]
    jax.config.update("jax_log_compiles", before)


def _region():
    @partial.partial_trace(graph_breaks=True)
    def f(x):
        n = int(x.sum())  # a value read: the rest of the call runs lazily
        anchors = eg.arange(0, 4 * 37, 4) + eg.full((37,), 0.5)
        return x * (anchors + eg.tensor(np.arange(37.0, dtype="float32")))[n:].sum()

    return f


@pytest.mark.parametrize("call", ["first, handed over", "later, lazy"])
def test_constants_of_a_region_with_breaks_compile_no_primitive_program(compiles, caplog, call):
    x = eg.tensor([1.0, 2.0])
    want = (np.arange(0, 148, 4) + 0.5 + np.arange(37.0))[3:].sum() * np.array([1.0, 2.0])
    f = _region()
    if call == "later, lazy":
        f(x)
    # what a new process has: no program objects, nothing in jax's in-memory caches
    creation._full_program.cache_clear()
    creation._arange_program.cache_clear()
    jax.clear_caches()
    caplog.clear()
    np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)
    assert not [name for name in compiles() if name in PRIMITIVE_PROGRAMS]
