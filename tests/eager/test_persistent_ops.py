"""Eager ops' executables on disk, keyed before tracing (`eager/core/ops/persistent.py`): a program
stored by one op object loads into a fresh one (what a new process does) without tracing, equal
to the compiled one; every part of the key separates programs; a damaged or foreign entry is
compiled anew; what cannot be keyed runs through the plain jit."""

import pickle
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import partial
import xla_segments
from eager.core.ops import Op
from eager.core.ops import persistent as P
from xla_segments import kept, store

ROOT = Path(__file__).resolve().parents[2]
TRACE = "/jax/core/compile/jaxpr_trace_duration"


@pytest.fixture
def events():
    """jax's and eager's monitoring events during the test, by name."""
    seen: dict[str, int] = {}

    def count(event, *args, **kwargs):
        seen[event] = seen.get(event, 0) + 1

    jax.monitoring.register_event_listener(count)
    jax.monitoring.register_event_duration_secs_listener(count)
    yield seen
    jax.monitoring.unregister_event_listener(count)
    jax.monitoring.unregister_event_duration_listener(count)


def axpy(x, y, *, a):
    return a * x + jnp.sin(y)


def fresh_op(fn=axpy, persist=("test_axpy",)) -> Op:
    """A new op object, as a new process has: nothing compiled, nothing loaded."""
    op = Op("test_axpy", fn)
    op.persist = persist
    return op


def run(op: Op, *args, a=2.0):
    return np.asarray(eg.apply(op, *args, a=a).numpy())


def test_a_fresh_op_loads_the_stored_program_without_tracing(cache, events):
    x, y = eg.tensor(np.arange(6, dtype=np.float32)), eg.tensor(np.ones(6, np.float32))
    first = run(fresh_op(), x, y)
    assert isinstance(fresh_op().jitted((("a", 2.0),)), P.Persistent)
    assert len(list(cache.iterdir())) == 1 and P.HIT_EVENT not in events
    events.clear()
    again = run(fresh_op(), x, y)
    assert events.get(P.HIT_EVENT) == 1 and events.get(P.LOAD_EVENT) == 1
    assert TRACE not in events  # loaded by a key made before tracing
    np.testing.assert_array_equal(again, first)
    np.testing.assert_allclose(first, 2.0 * np.arange(6) + np.sin(1.0), rtol=1e-6)


def test_the_gradient_program_is_kept_too(cache, events):
    x = eg.tensor(np.linspace(-1, 1, 5, dtype=np.float32))
    grads = []
    for _ in range(2):
        op = fresh_op()
        y = eg.tensor(np.ones(5, np.float32))
        with eg.autodiff.GradManager().attach([x]) as gm:
            gm.backward(eg.apply(op, x, y, a=3.0).sum())
        grads.append(x.grad.numpy())
        x.grad = None
    assert events.get(P.HIT_EVENT) == 2  # the forward and the vjp
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_allclose(grads[0], 3.0)


@pytest.mark.parametrize("change", ["attribute", "shape", "dtype", "weak type", "scalar",
                                    "op name", "variant"])
def test_each_part_of_the_key_separates_programs(cache, events, change):
    s, x = jnp.asarray(1.0, jnp.float32), eg.tensor(np.ones((2, 3), np.float32))
    run(fresh_op(), s, x)
    events.clear()
    other = {
        "attribute": lambda: run(fresh_op(), s, x, a=3.0),
        "shape": lambda: run(fresh_op(), s, eg.tensor(np.ones((3, 2), np.float32))),
        "dtype": lambda: run(fresh_op(), jnp.asarray(1, jnp.int32), x),
        "weak type": lambda: run(fresh_op(), jnp.asarray(1.0), x),
        "scalar": lambda: run(fresh_op(), 1.0, x),
        "op name": lambda: run(fresh_op(persist=("test_axpy_2",)), s, x),
        "variant": lambda: run(fresh_op(persist=("test_axpy", "rows")), s, x),
    }[change]
    other()
    assert P.HIT_EVENT not in events and TRACE in events  # not the first one's program


def test_a_changed_jax_setting_is_another_program(cache, events):
    x = eg.tensor(np.ones(3, np.float32))
    op = fresh_op()
    run(op, x, 1)
    with jax.enable_x64(True):  # a Python int is an int64 in the program now
        events.clear()
        assert eg.apply(op, x, 1, a=2.0).numpy().dtype == np.float32
        assert TRACE in events
        events.clear()
        eg.apply(fresh_op(), x, 1, a=2.0).numpy()
        assert events.get(P.HIT_EVENT) == 1


@pytest.mark.parametrize("damage", ["truncated", "header", "digest", "payload", "trailing",
                                    "another key"])
def test_a_damaged_or_foreign_entry_is_not_used(cache, events, damage):
    x = eg.tensor(np.arange(4, dtype=np.float32))
    expected = run(fresh_op(), x, x)
    (entry,) = cache.iterdir()
    data = bytearray(entry.read_bytes())
    if damage == "truncated":
        entry.write_bytes(data[:100])
    elif damage == "another key":  # a hash collision: the file holds the key it was written for
        text, *rest = pickle.loads(store.verified(bytes(data)))
        entry.write_bytes(store.framed(pickle.dumps(("another program", *rest))))
    else:  # one bit flipped: in the magic tag, the digest, the body's middle, its last byte
        at = {"header": 2, "digest": len(store.MAGIC) + 5, "payload": len(data) // 2,
              "trailing": len(data) - 1}[damage]
        data[at] ^= 1
        entry.write_bytes(bytes(data))
    events.clear()
    np.testing.assert_array_equal(run(fresh_op(), x, x), expected)
    assert P.HIT_EVENT not in events and TRACE in events
    # a damaged file is removed (jax's cache serves the program from now on); a file of
    # another key is that key's
    assert entry.exists() == (damage == "another key")


def test_what_cannot_be_keyed_runs_through_the_plain_jit(cache):
    x = eg.tensor(np.ones(3, np.float32))
    assert not isinstance(fresh_op(persist=None).jitted((("a", 2.0),)), P.Persistent)
    # an attribute whose repr is not all of it (a function) may differ between processes
    assert not isinstance(fresh_op().jitted((("a", np.sin),)), P.Persistent)
    op = fresh_op()
    # inside a trace the wrapper hands the tracers to the plain jit
    traced = jax.jit(lambda v: op.jitted((("a", 2.0),))(v, v))(jnp.ones(3))
    np.testing.assert_allclose(traced, 2.0 + np.sin(1.0), rtol=1e-6)
    assert not cache.exists() or not list(cache.iterdir())
    run(op, x, x)
    assert len(list(cache.iterdir())) == 1


def test_an_attribute_holding_an_ellipsis_is_keyed(cache):
    """`x[..., :2]` gives getitem the spec `(Ellipsis, ("slice", None, 2, None))`: `...`
    is one object, whose repr says all of it."""
    spec = (Ellipsis, ("slice", None, 2, None))
    assert isinstance(fresh_op().jitted((("a", spec),)), P.Persistent)


def test_a_first_wrap_inside_a_trace_keys_concrete_arrays_only(cache, monkeypatch):
    """The wrapper learns jax's array type at its first use; made in a trace, a constant is a
    tracer (the GPU run met this: every later traced call went to a compiled executable)."""
    monkeypatch.setattr(kept, "_ARRAY", [])
    op = fresh_op()
    traced = jax.jit(lambda v: op.jitted((("a", 2.0),))(v, v))(jnp.ones(3))
    np.testing.assert_allclose(traced, 2.0 + np.sin(1.0), rtol=1e-6)
    assert not issubclass(kept._ARRAY[0], jax.core.Tracer)
    again = jax.jit(lambda v: op.jitted((("a", 2.0),))(v, v))(jnp.ones(3) * 2)
    np.testing.assert_allclose(again, 4.0 + np.sin(2.0), rtol=1e-6)


def test_ranks_of_a_distributed_run_keep_plain_jits(cache, monkeypatch):
    """Ranks share the cache directory but not devices: an executable one rank stored would
    address another's device."""
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    assert not isinstance(fresh_op().jitted((("a", 2.0),)), P.Persistent)


def test_no_cache_directory_means_plain_jits():
    before = xla_segments.cache_dir()
    partial.set_cache_dir(None)
    try:
        assert xla_segments.cache_dir() is None
        assert not isinstance(fresh_op().jitted((("a", 2.0),)), P.Persistent)
    finally:
        partial.set_cache_dir(before)


def test_an_executable_from_jaxs_cache_is_not_copied(cache, events):
    """jaxlib 0.10.2 serializes an executable that it loaded from its own cache without its
    compiled functions; such a copy would fail in the next process."""
    x = eg.tensor(np.arange(5, dtype=np.float32))
    expected = run(fresh_op(), x, x)  # stored here and, by jax, in its own cache
    for entry in cache.iterdir():
        entry.unlink()
    partial.set_cache_dir(cache.parent)  # jax reopens its cache
    events.clear()
    np.testing.assert_array_equal(run(fresh_op(), x, x), expected)
    assert events.get("/jax/compilation_cache/cache_hits") == 1
    assert not list(cache.iterdir())
    np.testing.assert_array_equal(run(fresh_op(), x, x), expected)


CHILD = """
import sys
import numpy as np
import eager as eg, eager.functional as F, eager.module as M, eager.optimizer as optim
import jax
import partial
partial.set_cache_dir(sys.argv[1])
loads = []
jax.monitoring.register_event_listener(
    lambda event, **_: loads.append(1) if event == "/eager/persistent_cache/hits" else None)
eg.random.seed(0)
net = M.Sequential(M.Conv2d(2, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(), M.Flatten(),
                   M.Linear(4 * 5 * 5, 3))
gm = eg.autodiff.GradManager().attach(net.parameters())
opt = optim.Adam(net.parameters(), lr=1e-2)
rng = np.random.default_rng(0)
for step in range(3):
    x = eg.tensor(rng.standard_normal((6, 2, 5, 5)).astype(np.float32))
    y = eg.tensor(rng.integers(0, 3, 6))
    with gm:
        logits = net(x)
        keep = logits.max(axis=1) > 0
        loss = F.cross_entropy(logits, y) + (logits[keep] ** 2).mean() * 0.1
        gm.backward(loss)
    opt.step().clear_grad()
    print(repr(float(loss.item())))
print(repr(np.concatenate([p.numpy().ravel() for p in net.parameters()]).tobytes().hex()))
print(len(loads))
"""


@pytest.mark.slow
def test_a_second_process_trains_bit_for_bit_as_the_first(tmp_path):
    """Conv, batch norm, a ragged selection, Adam: filled by one process, loaded by the next."""
    runs = [subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    stored = len(list((tmp_path / "eager-ops").iterdir()))
    *first, first_loads = runs[0].stdout.split()
    *second, second_loads = runs[1].stdout.split()
    assert stored > 10 and int(first_loads) == 0 and int(second_loads) == stored
    assert first == second


def test_filled_and_ranged_tensors_load_their_programs_as_ops_do(cache, events):
    """`eg.full` and `eg.arange` run programs of their own outside any op where numpy would not
    give jax's bits (a float filling an integer tensor, float bounds of an integer range): a
    new process loads them by their shape, dtype and bounds. The rest are made on the host: no
    program at all."""
    from eager.core import creation

    made = []
    for _ in range(2):  # each time what a new process has: no program objects yet
        creation._full_program.cache_clear()
        creation._arange_program.cache_clear()
        events.clear()
        made.append([eg.full((2, 3), 2.7, "int32").numpy(), eg.zeros((4,), "int32").numpy(),
                     eg.full((2,), True, "bool").numpy(), eg.arange(0.5, 7, 2, "int32").numpy(),
                     eg.arange(1, 7, 2).numpy()])
    assert events.get(P.HIT_EVENT) == 2 and TRACE not in events
    for got, want in zip(made[1], [np.full((2, 3), 2, "int32"), np.zeros(4, "int32"),
                                   np.ones(2, bool), np.arange(0, 7, 2, dtype="int32"),
                                   np.arange(1, 7, 2, dtype="float32")]):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    np.testing.assert_array_equal(made[0][3], made[1][3])


def test_the_tapes_gradient_sums_load_their_program_as_ops_do(cache, events):
    """A tensor read twice gets two cotangents, which the backward adds: a new process loads
    that addition per shape from disk (jax's own `add` compiled in every process, once per
    shape: 29 compiles in a detector's first step)."""
    from eager.autodiff import GradManager
    from eager.core import tape

    grads = []
    for _ in range(2):  # each time what a new process has: no program object yet
        tape._add.call = None
        events.clear()
        w = eg.Parameter(np.arange(3.0, dtype="float32"))
        with GradManager().attach([w]) as gm:
            gm.backward((w * w + w).sum())
        grads.append(w.grad.numpy())
    assert events.get(P.HIT_EVENT, 0) >= 1 and TRACE not in events
    np.testing.assert_array_equal(grads[0], 2 * np.arange(3.0) + 1)
    np.testing.assert_array_equal(grads[1], grads[0])


def test_a_loaded_programs_results_have_the_abstract_values_of_any_other(cache, events):
    """jax 0.12 read back its layout singleton as a second object, so arrays from a loaded
    program had abstract values equal to no other array's: every key built on them missed."""
    x, y = eg.tensor(np.arange(6, dtype=np.float32)), eg.tensor(np.ones(6, np.float32))
    run(fresh_op(), x, y)
    events.clear()
    loaded = eg.apply(fresh_op(), x, y, a=2.0)
    assert events.get(P.HIT_EVENT) == 1
    assert eg.read(loaded).aval == jnp.zeros(6, jnp.float32).aval
