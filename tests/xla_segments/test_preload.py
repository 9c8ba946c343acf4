"""Reading ahead what the last run of the same command used (`xla_segments/preload.py`): the
list a run leaves behind, the next run's entries read on the pool and taken by `store.read`, and
a damaged or missing entry in the list changing nothing but the time."""

import numpy as np
import pytest

import eager as eg
import partial
import xla_segments
from eager.core.ops import Op
from xla_segments import compile_pool, preload, store


def axpy(x, y, *, a):
    return a * x + y


def run_fresh_op(x):
    """An op object as a new process has it: nothing loaded."""
    op = Op("test_preload_axpy", axpy)
    op.persist = ("test_preload_axpy",)
    return np.asarray(eg.apply(op, x, x, a=3.0).numpy())


@pytest.fixture
def new_run(tmp_path, monkeypatch):
    """A cache of this test's own; `new_run()` forgets what this process used and read ahead,
    as a new process of the same command would, and starts it."""
    before = xla_segments.cache_dir()
    partial.set_cache_dir(tmp_path)
    monkeypatch.setattr(store, "used", {})
    monkeypatch.setattr(store, "preloaded", {})
    monkeypatch.setitem(preload._state, "dir", None)

    def again():
        preload._write()  # what the last run leaves at its exit
        store.used.clear()
        store.preloaded.clear()
        preload._state["dir"] = None
        preload.start(str(tmp_path))

    yield again
    partial.set_cache_dir(before)


@pytest.mark.skipif(not compile_pool.parallel(), reason="reading ahead needs a compile pool")
def test_the_next_run_reads_ahead_what_the_last_one_used(new_run, tmp_path):
    x = eg.tensor(np.arange(5, dtype=np.float32))
    first = run_fresh_op(x)
    (entry,) = (tmp_path / "eager-ops").iterdir()
    new_run()
    assert preload.list_path(str(tmp_path)).read_text().split() == [f"eager-ops/{entry.name}"]
    assert list(store.preloaded) == [entry]
    np.testing.assert_array_equal(run_fresh_op(x), first)
    assert not store.preloaded and list(store.used) == [entry]  # taken, not read again


@pytest.mark.skipif(not compile_pool.parallel(), reason="reading ahead needs a compile pool")
@pytest.mark.parametrize("damage", ["flipped", "gone"])
def test_a_damaged_or_missing_entry_in_the_list_is_compiled_again(new_run, tmp_path, damage):
    x = eg.tensor(np.arange(5, dtype=np.float32))
    first = run_fresh_op(x)
    (entry,) = (tmp_path / "eager-ops").iterdir()
    if damage == "gone":
        entry.unlink()
    else:
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 1
        entry.write_bytes(bytes(data))
    preload._write()
    store.used.clear()
    new_run()
    np.testing.assert_array_equal(run_fresh_op(x), first)
    # refused and removed (jax's own cache, which holds the program too, serves it from now on)
    assert not entry.exists() or store.verified(entry.read_bytes()) is not None


def test_a_list_naming_files_outside_the_cache_is_not_followed(new_run, tmp_path):
    target = preload.list_path(str(tmp_path))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("../../etc/passwd\n")
    preload._state["dir"] = None
    preload.start(str(tmp_path))
    assert not store.preloaded
