"""`partial.alias_megengine` and `python -m partial.run_megengine`: MegEngine code imports this
project unchanged, never in place of a real MegEngine unless asked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import eager
import eager.functional
import eager.module.normalization
import partial
from partial.megengine_alias import _Alias

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def alias():
    partial.alias_megengine(shadow=True)  # shadow: a test machine may have MegEngine installed
    yield
    partial.unalias_megengine()


def test_megengine_modules_are_the_projects_own(alias):
    import megengine
    import megengine.functional as F
    import megengine.jit as jit
    from megengine.module.normalization import GroupNorm

    assert megengine is eager and F is eager.functional and jit is partial
    assert GroupNorm is eager.module.normalization.GroupNorm
    assert megengine.functional.nn.relu is F.relu


def test_aliased_modules_keep_their_own_spec(alias):
    import megengine.module.normalization  # noqa: F401

    assert eager.module.normalization.__spec__.name == "eager.module.normalization"


def test_a_missing_counterpart_names_the_module(alias):
    with pytest.raises(partial.MegEngineAliasError, match=r"megengine\.no_such_thing.*eager\."
                                                          r"no_such_thing"):
        import megengine.no_such_thing  # noqa: F401


def test_unalias_forgets_the_served_modules(alias):
    import megengine  # noqa: F401

    partial.unalias_megengine()
    assert "megengine" not in sys.modules
    assert not any(isinstance(f, _Alias) for f in sys.meta_path)
    partial.alias_megengine(shadow=True)  # the fixture removes it again


def test_an_installed_megengine_is_not_hidden(tmp_path, monkeypatch):
    fake = tmp_path / "megengine"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(partial.MegEngineAliasError, match="shadow=True"):
        partial.alias_megengine()
    assert not any(isinstance(f, _Alias) for f in sys.meta_path)
    partial.alias_megengine(shadow=True)
    try:
        import megengine

        assert megengine is eager
    finally:
        partial.unalias_megengine()


def test_run_megengine_runs_a_script_with_its_arguments(tmp_path):
    script = tmp_path / "train.py"
    (tmp_path / "helper_mod.py").write_text("VALUE = 3\n")
    script.write_text(textwrap.dedent("""
        import sys
        import megengine as mge
        import megengine.functional as F
        import helper_mod  # the script's folder is on sys.path, as with `python train.py`

        x = mge.tensor([1.0, -2.0])
        print(sys.argv[1:], F.relu(x).numpy().tolist(), helper_mod.VALUE, __name__)
    """))
    done = subprocess.run([sys.executable, "-m", "partial.run_megengine", "--shadow",
                           str(script), "--lr", "0.1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['--lr', '0.1'] [1.0, 0.0] 3 __main__"
