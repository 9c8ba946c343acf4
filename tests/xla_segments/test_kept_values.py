"""Literal values kept on disk beside executables (`xla_segments.kept_value`, `store.read_value`):
derived once per key and environment, read back by a later process without deriving them again;
every part of the key separates values; a damaged, foreign or non-literal file is refused (never
run: values are parsed as literals) and derived anew; nothing is kept with the cache off or for
what cannot be keyed. Its user, ragged dispatch, is tested in tests/eager/test_ops_ragged.py."""

import jax
import numpy as np
import pytest

import partial
import xla_segments
from xla_segments import kept_value, store


@pytest.fixture
def folder(tmp_path):
    """A cache directory of this test's own; its folder of values is returned."""
    before = xla_segments.cache_dir()
    partial.set_cache_dir(tmp_path)
    yield tmp_path / "eager-values"
    partial.set_cache_dir(before)


class Maker:
    """A derivation that counts its calls."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


def test_a_value_is_derived_once_and_read_back(folder):
    make = Maker(((0, 2), None, "x", 1.5))
    assert kept_value("plan", ("op", (3, 4)), make) == make.value
    assert kept_value("plan", ("op", (3, 4)), make) == make.value
    assert make.calls == 1
    assert len(list(folder.iterdir())) == 1


@pytest.mark.parametrize("change", ["what", "key", "setting", "global setting"])
def test_each_part_of_the_key_separates_values(folder, change):
    kept_value("plan", ("op", (3, 4)), Maker(1))
    other = Maker(2)
    if change == "what":
        got = kept_value("other plan", ("op", (3, 4)), other)
    elif change == "key":
        got = kept_value("plan", ("op", (3, 5)), other)
    elif change == "setting":  # one of the trace context's
        with jax.enable_x64(True):
            got = kept_value("plan", ("op", (3, 4)), other)
    else:  # one outside the trace context: in jax's settings only
        name = "jax2tf_associative_scan_reductions"
        before = jax.config.values[name]
        jax.config.update(name, not before)
        try:
            got = kept_value("plan", ("op", (3, 4)), other)
        finally:
            jax.config.update(name, before)
    assert got == 2 and other.calls == 1
    assert len(list(folder.iterdir())) == 2


@pytest.mark.parametrize("damage", ["truncated", "header", "digest", "payload", "trailing",
                                    "another key", "not a literal", "a pickle",
                                    "an executable's frame"])
def test_a_damaged_foreign_or_unparsable_file_is_derived_anew(folder, damage, tmp_path):
    kept_value("plan", ("op",), Maker((1, 2)))
    (entry,) = folder.iterdir()
    data = bytearray(entry.read_bytes())
    ran = tmp_path / "ran"
    if damage == "truncated":
        entry.write_bytes(data[:20])
    elif damage == "another key":  # a hash collision: the file holds the key it was written for
        entry.write_bytes(store.framed(repr(("another key", (9, 9))).encode(), store.VALUE_MAGIC))
    elif damage == "not a literal":  # a valid frame around code: parsed, never evaluated
        code = f"(open({str(ran)!r}, 'w'), (1, 2))"
        entry.write_bytes(store.framed(code.encode(), store.VALUE_MAGIC))
    elif damage == "a pickle":
        import pickle
        entry.write_bytes(store.framed(pickle.dumps(("plan", (1, 2))), store.VALUE_MAGIC))
    elif damage == "an executable's frame":  # a file of the other kind, moved here
        entry.write_bytes(store.framed(repr((None, (1, 2))).encode()))
    else:  # one bit flipped: in the magic tag, the digest, the body's middle, its last byte
        at = {"header": 2, "digest": len(store.MAGIC) + 5, "payload": len(data) // 2,
              "trailing": len(data) - 1}[damage]
        data[at] ^= 1
        entry.write_bytes(bytes(data))
    again = Maker((1, 2))
    assert kept_value("plan", ("op",), again) == (1, 2) and again.calls == 1
    assert not ran.exists()
    healed = Maker((1, 2))  # written anew: read from now on
    kept_value("plan", ("op",), healed)
    assert healed.calls == 0


def test_nothing_is_kept_for_what_cannot_be_keyed_or_printed(folder):
    unkeyed = Maker(1)
    for _ in range(2):
        kept_value("plan", ("op", np.sin), unkeyed)  # a function: its repr is not all of it
    assert unkeyed.calls == 2
    for value in (np.arange(3), np.dtype("float32"), np.float64(1.0), float("nan"), frozenset({1}),
                  (1, np.int64(2))):  # none reads back as itself from its text
        unprintable = Maker(value)
        for _ in range(2):
            kept_value("plan", ("op", repr(value)), unprintable)
        assert unprintable.calls == 2, value
    assert not folder.exists() or not list(folder.iterdir())


def test_the_cache_off_keeps_nothing():
    before = xla_segments.cache_dir()
    partial.set_cache_dir(None)
    try:
        make = Maker(1)
        kept_value("plan", ("op",), make)
        kept_value("plan", ("op",), make)
        assert make.calls == 2
    finally:
        partial.set_cache_dir(before)


def test_a_setting_that_cannot_be_hashed_still_keys(folder, monkeypatch):
    """Another jax may hold a list among its settings: the digest is then made each time."""
    kept_value("plan", ("op",), Maker(1))
    values = type(jax.config).values
    monkeypatch.setattr(type(jax.config), "values", property(
        lambda config: {**values.fget(config), "test_unhashable_setting": [1, 2]}))
    again = Maker(1)
    assert kept_value("plan", ("op",), again) == 1 and again.calls == 1  # another setting
    assert kept_value("plan", ("op",), again) == 1 and again.calls == 1  # read back


def test_an_entry_that_does_not_pickle_is_not_written_and_raises_nothing(tmp_path):
    """A cache that cannot keep a program costs the next process a compile, never this call."""
    compiled = jax.jit(lambda x: x + 1).lower(1.0).compile()
    path = tmp_path / "entry.bin"
    store.write(path, "key", compiled, extra=lambda: None)  # a local function: no pickle
    assert not path.exists() and not list(tmp_path.iterdir())
    store.write(path, "key", compiled, extra={"plain": 1})
    assert store.read(path, "key") is not None
