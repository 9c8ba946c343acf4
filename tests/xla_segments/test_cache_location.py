"""Where the cache lives (`xla_segments/cache_location.py`) and its size limit
(`xla_segments/eviction.py`): the platform's per-user location, created private; a directory
another user owns or can write to is refused; the least recently used files go first, and
several processes evicting at once lose nothing they need."""

import os
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import pytest

import xla_segments
from xla_segments import cache_location, eviction


def test_the_default_is_the_platforms_cache_location(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_location.default_dir() == str(tmp_path / "partial-trace")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert cache_location.default_dir() == str(tmp_path / "me" / ".cache" / "partial-trace")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cache_location.default_dir() == str(
        tmp_path / "me" / "Library" / "Caches" / "partial-trace")


def test_a_new_directory_is_created_private(tmp_path):
    made = cache_location.usable_directory(tmp_path / "a" / "b")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700


def test_a_directory_others_can_write_to_is_refused(tmp_path):
    (tmp_path / "shared").mkdir(mode=0o700)
    os.chmod(tmp_path / "shared", 0o770)
    with pytest.raises(xla_segments.CacheDirError, match="go-w"):
        cache_location.usable_directory(tmp_path / "shared")


def test_a_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.raises(xla_segments.CacheDirError, match="belongs to another user"):
        cache_location.usable_directory(tmp_path)


def test_an_unusable_default_turns_the_cache_off_with_a_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.delenv("PARTIAL_CACHE_DIR", raising=False)
    monkeypatch.setattr(cache_location, "default_dir", lambda: str(blocker / "cache"))
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)  # (no directory of the user's own)
    try:
        with pytest.warns(xla_segments.CacheWarning, match="not kept between runs"):
            assert cache_location._from_environment() is None
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


@pytest.mark.parametrize("text, size", [("4G", 4 << 30), ("500M", 500 << 20), ("1.5k", 1536),
                                        ("123", 123), ("2GiB", 2 << 30), ("7 mb", 7 << 20)])
def test_sizes_are_read_as_a_person_writes_them(text, size):
    assert eviction.parse_size(text) == size


def test_a_size_that_is_not_one_says_how_to_write_it():
    with pytest.raises(ValueError, match="4G or 500M"):
        eviction.parse_size("lots")


def fill(directory, names, size=1000):
    """Files of `size` bytes, each used one second after the one before it."""
    now = time.time()
    for i, name in enumerate(names):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
        os.utime(path, (now - 100 + i, now - 100 + i))


def test_the_least_recently_used_go_first(tmp_path):
    fill(tmp_path, ["eager-ops/a.bin", "segments/b.bin", "jit_c-cache", "eager-ops/d.bin"])
    os.utime(tmp_path / "eager-ops/a.bin")  # loaded just now: the most recently used
    assert eviction.evict(tmp_path, 2500) == 2000
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.*") if p.is_file())
    assert left == ["eager-ops/a.bin", "eager-ops/d.bin"]


def test_writing_past_the_limit_evicts_down_to_nine_tenths(tmp_path):
    fill(tmp_path, [f"eager-ops/{i}.bin" for i in range(10)])
    xla_segments.set_cache_max_size(9500)
    try:
        eviction.wrote(tmp_path, 1000)  # (the caller's file: counted, as if written)
        assert eviction.size_of(tmp_path) <= 9500 * 0.9
        assert (tmp_path / "eager-ops/9.bin").exists()
        assert not (tmp_path / "eager-ops/0.bin").exists()
    finally:
        xla_segments.set_cache_max_size(None)


def test_processes_evicting_at_once_lose_nothing_they_need(tmp_path):
    """Evictions racing each other (threads here, processes in use) skip what another removed;
    the survivors are the newest, whole."""
    fill(tmp_path, [f"segments/{i:03d}.bin" for i in range(200)], size=100)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: eviction.evict(tmp_path, 5000), range(8)))
    assert all(r <= 5000 for r in results)
    left = sorted(p.name for p in (tmp_path / "segments").iterdir())
    assert left == [f"{i:03d}.bin" for i in range(150, 200)]
    assert all(p.stat().st_size == 100 for p in (tmp_path / "segments").iterdir())
