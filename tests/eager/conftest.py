"""Fixtures of the eager tests."""

import pytest

import partial
import xla_segments


@pytest.fixture
def cache(tmp_path):
    """A cache directory of this test's own, for eager ops' programs (its `eager-ops` folder
    is returned); the session's is restored after."""
    before = xla_segments.cache_dir()
    partial.set_cache_dir(tmp_path)
    yield tmp_path / "eager-ops"
    partial.set_cache_dir(before)
