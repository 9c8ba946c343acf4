"""Every executable this project compiles takes `xla_segments.base_compile_options()` (on the CPU,
LLVM at -O2 rather than -O3: shorter compiles), and computes exactly what XLA's defaults compute;
a level the user's `XLA_FLAGS` chooses is left to win."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import xla_segments
from eager.core.ops import OPS
from tests.helpers import fresh_env
from xla_segments import CompileOptions, Segment, base_compile_options

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="set on the CPU only")

NASTY = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-42, -1e-42, 3e38, -3e38, 1.5, -2.25,
                  7.0, 1e-7, 0.5, -0.5, 88.7], np.float32)


def _block(p, x):
    """A transformer block's loss: layer norm, attention, softmax, gelu, matmuls."""
    mu = x.mean(-1, keepdims=True)
    h = (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * p["g"]
    att = jax.nn.softmax(jnp.einsum("btd,bsd->bts", h @ p["q"], h @ p["k"]) / 4.0, -1)
    h = x + jnp.einsum("bts,bsd->btd", att, h @ p["v"])
    return (jax.nn.gelu(h @ p["w"]) ** 2).mean()


def _conv_bn(w, x):
    """A convolution, batch normalization's statistics and a relu."""
    y = jax.lax.conv_general_dilated(x, w, (2, 2), "SAME",
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
    mean, var = y.mean((0, 2, 3), keepdims=True), y.var((0, 2, 3), keepdims=True)
    return jax.nn.relu((y - mean) * jax.lax.rsqrt(var + 1e-5)).sum()


def _programs():
    rng = np.random.default_rng(0)
    p = {name: jnp.asarray(rng.normal(size=(16, 16)).astype(np.float32) * 0.3)
         for name in "qkvw"}
    p["g"] = jnp.ones(16)
    x = jnp.asarray(rng.normal(size=(2, 8, 16)).astype(np.float32))
    w = jnp.asarray(rng.normal(size=(8, 3, 3, 3)).astype(np.float32))
    img = jnp.asarray(rng.normal(size=(2, 3, 12, 12)).astype(np.float32))
    nasty = jnp.asarray(np.concatenate([NASTY, rng.normal(size=48).astype(np.float32)]))
    return {
        "transformer block and its gradient": (jax.value_and_grad(_block), (p, x)),
        "convolution, batch norm and their gradient": (jax.value_and_grad(_conv_bn, (0, 1)),
                                                       (w, img)),
        "elementwise chain on NaN, infinities, denormals": (
            lambda a: jnp.tanh(a) * jax.nn.sigmoid(a) + jnp.exp(-a * a) + jnp.log1p(jnp.abs(a)),
            (nasty,)),
        "reductions and a scatter": (
            lambda a: (jnp.cumsum(a), a.reshape(8, 8).max(0), jnp.zeros(5).at[
                jnp.arange(64) % 5].add(a)), (nasty,)),
    }


@pytest.mark.parametrize("name", list(_programs()))
def test_the_same_bits_as_xla_defaults(name):
    fn, args = _programs()[name]
    lowered = jax.jit(fn).lower(*args)
    ours = lowered.compile(compiler_options=base_compile_options())(*args)
    default = lowered.compile()(*args)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(default), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_every_kind_of_executable_takes_them():
    base = base_compile_options()
    assert base == {"xla_backend_optimization_level": 2}
    # eager ops: plain, quick and with options of their own
    for name in ("add", "conv", "matmul", "adam_update"):
        assert OPS[name].options(()) is not None
        assert base.items() <= OPS[name].options(()).items()
    assert base.items() <= xla_segments.quick_compile_options().items()
    # segments, under the options a segment sets, which win
    seg = Segment(lambda a: a * 2, [jax.ShapeDtypeStruct((3,), jnp.float32)],
                  options=CompileOptions(compiler_options={"xla_backend_optimization_level": 1}))
    assert seg.forward().compiler_options["xla_backend_optimization_level"] == 1
    plain = Segment(lambda a: a * 2, [jax.ShapeDtypeStruct((3,), jnp.float32)])
    assert plain.forward().compiler_options == base
    # and the eager step still computes
    np.testing.assert_array_equal((eg.tensor([1.0, 2.0]) + 1).numpy(), [2.0, 3.0])


@pytest.mark.parametrize(("flags", "want"), [
    ("", {"xla_backend_optimization_level": 2}),
    ("--xla_backend_optimization_level=3", {}),
])
def test_the_users_level_wins(flags, want):
    code = ("import json, xla_segments; "
            "print(json.dumps(xla_segments.base_compile_options()))")
    env = {**fresh_env(), "XLA_FLAGS": flags}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == want
