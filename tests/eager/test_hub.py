"""`eager.hub`: the `pretrained` decorator and weights from the cache, the offline error, a
repository's entries from a local directory and (through a stand-in `git` command) from a git
repository, and that a downloaded file is data, never code. No test touches the network:
`urlopen` is replaced by one that fails wherever a download is not the point."""

from __future__ import annotations

import importlib.util
import inspect
import os
import pickle
import stat
import sys
import textwrap
import urllib.error
from pathlib import Path

import numpy as np
import pytest

import eager as eg
import eager.module as M
from eager import hub
from eager.hub import cache, download

URL = "https://models.example.com/weights/linear_3_2_0a1b2c3d.pkl"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty cache directory (`MGE_HOME`) and no network: any download fails."""
    monkeypatch.setenv("MGE_HOME", str(tmp_path / "home"))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(download.urllib.request, "urlopen", offline)
    return tmp_path / "home"


def _linear_state(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"weight": rng.standard_normal((2, 3)).astype("float32"),
            "bias": rng.standard_normal(2).astype("float32")}


@hub.pretrained(URL)
def linear(**kwargs):
    """A 3-to-2 linear layer."""
    return M.Linear(3, 2, **kwargs)


def test_pretrained_adds_the_keyword_and_keeps_name_doc_and_arguments(home):
    assert linear.__name__ == "linear" and linear.__doc__ == "A 3-to-2 linear layer."
    assert "pretrained" in inspect.signature(linear).parameters
    net = linear()  # pretrained=False: nothing is downloaded (the network is off)
    assert isinstance(net, M.Linear)
    assert linear(pretrained=False, bias=False).bias is None
    assert linear(False, bias=False).bias is None  # MegEngine's first positional argument
    with pytest.raises(TypeError):
        linear(False, 3)  # the constructor's own arguments go by keyword, as in MegEngine


def test_pretrained_loads_the_weights_from_the_cache_without_network(home):
    state = _linear_state()
    path = cache.cached_file(URL)
    assert Path(path).parent == home / "serialized"
    os.makedirs(os.path.dirname(path))
    eg.save(state, path)
    net = linear(pretrained=True)
    np.testing.assert_array_equal(net.weight.numpy(), state["weight"])
    np.testing.assert_array_equal(net.bias.numpy(), state["bias"])


def test_cached_file_name_is_megengine_s(tmp_path):
    # MegEngine 1.13 put this URL's file at serialized/009607_resnet18_naiveaug_70312_78a63ca6.pkl
    url = "https://data.megengine.org.cn/models/weights/resnet18_naiveaug_70312_78a63ca6.pkl"
    assert cache.cached_file(url, tmp_path) == str(
        tmp_path / "009607_resnet18_naiveaug_70312_78a63ca6.pkl")


def test_cache_directory_is_mge_home_else_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MGE_HOME", str(tmp_path / "mge"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.megengine_home() == str(tmp_path / "mge")
    monkeypatch.delenv("MGE_HOME")
    assert cache.megengine_home() == str(tmp_path / "xdg" / "megengine")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.megengine_home() == os.path.expanduser("~/.cache/megengine")


def test_offline_error_names_the_url_and_the_cache_path(home):
    path = cache.cached_file(URL)
    with pytest.raises(hub.DownloadError) as info:
        linear(pretrained=True)
    message = str(info.value)
    assert URL in message and path in message and "place it at" in message
    assert "test_hub.py" in message  # the user's line
    assert isinstance(info.value, eg.EagerError) and isinstance(info.value, hub.FetcherError)
    assert os.listdir(os.path.dirname(path)) == []  # no partial file left to be read later


def test_download_fills_the_cache_once(tmp_path, monkeypatch):
    source = tmp_path / "source.pkl"
    eg.save(_linear_state(1), source)
    url = source.as_uri()
    got = hub.load_serialized_obj_from_url(url, model_dir=tmp_path / "models")
    np.testing.assert_array_equal(np.asarray(got["bias"]), _linear_state(1)["bias"])
    assert os.listdir(tmp_path / "models") == [os.path.basename(cache.cached_file(url))]
    source.unlink()  # from now on only the cached copy exists
    again = hub.load_serialized_obj_from_url(url, model_dir=tmp_path / "models")
    np.testing.assert_array_equal(np.asarray(again["weight"]), _linear_state(1)["weight"])


class _Payload:
    """Unpickling it would create the marker file: what a malicious weights file does."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def test_a_pickle_that_runs_code_is_refused(home, tmp_path):
    marker = tmp_path / "pwned"
    path = cache.cached_file(URL)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        pickle.dump({"weight": _Payload(marker)}, f)
    with pytest.raises(eg.CheckpointError, match="refuses the global posix.mkdir"):
        linear(pretrained=True)
    assert not marker.exists()


# ----- a repository's entries ---------------------------------------------------------------------
HUBCONF = '''
"""A test hub."""
from helpers_pkg.nets import tiny

dependencies = ["numpy"]
CONSTANT = 3


def scaled(x, factor=2):
    """Multiply x by factor."""
    return x * factor


def _single_underscore():
    return 1
'''


@pytest.fixture
def repo(tmp_path):
    """A local repository: a hubconf.py that imports the repository's own package."""
    root = tmp_path / "repo"
    (root / "helpers_pkg").mkdir(parents=True)
    (root / "helpers_pkg" / "__init__.py").write_text("")
    (root / "helpers_pkg" / "nets.py").write_text(textwrap.dedent('''
        import eager.module as M

        def tiny(**kwargs):
            """A tiny linear layer."""
            return M.Linear(2, 1, **kwargs)
    '''))
    (root / "hubconf.py").write_text(HUBCONF)
    yield root
    for name in [n for n in sys.modules if n == "helpers_pkg" or n.startswith("helpers_pkg.")]:
        del sys.modules[name]


def test_list_help_and_load_from_a_local_directory(repo):
    path_before = list(sys.path)
    # as MegEngine: every callable whose name does not start with "__", sorted
    assert hub.list(str(repo)) == ["_single_underscore", "scaled", "tiny"]
    assert hub.help(repo, "scaled") == "Multiply x by factor."
    assert hub.load(str(repo), "scaled", 5, factor=3) == 15
    assert isinstance(hub.load(repo, "tiny", bias=False), M.Linear)
    assert sys.path == path_before and "hubconf" not in sys.modules


def test_import_module_gives_the_hubconf(repo):
    module = hub.import_module(str(repo))
    assert module.__doc__ == "A test hub." and module.CONSTANT == 3
    assert module.scaled(2) == 4


def test_missing_entry_and_dependency(repo):
    with pytest.raises(hub.HubconfError, match="no callable 'CONSTANT'.*eager.hub.list"):
        hub.load(repo, "CONSTANT")
    with pytest.raises(hub.HubconfError, match="no callable 'absent'"):
        hub.help(repo, "absent")
    (repo / "hubconf.py").write_text(HUBCONF.replace('["numpy"]', '["numpy", "no_such_mod.x"]'))
    with pytest.raises(hub.HubconfError, match="no_such_mod.x"):
        hub.load(repo, "scaled", 1)


def test_local_directory_errors(repo, tmp_path):
    with pytest.raises(hub.InvalidRepo, match="commit="):
        hub.list(repo, commit="abc123")
    (tmp_path / "empty").mkdir()
    with pytest.raises(hub.InvalidRepo, match="has no hubconf.py"):
        hub.list(tmp_path / "empty")
    with pytest.raises(hub.InvalidRepo, match="not a directory"):
        hub.list(tmp_path / "absent")


@pytest.mark.skipif(importlib.util.find_spec("megengine") is not None,
                    reason="megengine is importable (installed, or the alias is on)")
def test_a_hubconf_importing_megengine_asks_for_the_alias(tmp_path):
    (tmp_path / "hubconf.py").write_text("import megengine\n")
    with pytest.raises(hub.HubconfError, match="alias_megengine"):
        hub.list(tmp_path)


# ----- git repositories, through a stand-in `git` command ---------------------------------------
FAKE_GIT = '''#!{python}
import os, sys
with open({log!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
if "fail" in " ".join(sys.argv):
    sys.stderr.write("fatal: unable to access: Could not resolve host\\n")
    sys.exit(128)
if sys.argv[1] == "clone":
    os.makedirs(os.path.join(sys.argv[-1], ".git"))
    with open(os.path.join(sys.argv[-1], "hubconf.py"), "w") as f:
        f.write("def entry():\\n    return 'cloned'\\n")
'''


@pytest.fixture
def fake_git(home, tmp_path, monkeypatch):
    """A `git` on PATH that records its arguments, and clones a one-entry repository (or fails
    for a repository named "fail")."""
    bin_dir, log = tmp_path / "bin", tmp_path / "git.log"
    bin_dir.mkdir()
    git = bin_dir / "git"
    git.write_text(FAKE_GIT.format(python=sys.executable, log=str(log)))
    git.chmod(git.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_git_repository_is_cloned_once_into_the_cache(fake_git, home):
    assert hub.load("someone/models:dev", "entry") == "cloned"
    assert hub.list("someone/models:dev") == ["entry"]  # use_cache: no second clone
    calls = fake_git.read_text().splitlines()
    assert len(calls) == 1
    assert calls[0].startswith("clone --depth=1 -b dev https://github.com/someone/models.git ")
    (clone,) = os.listdir(home / "hub")
    assert not (home / "hub" / clone / ".git").exists()
    hub.list("someone/models", git_host="git.example.org", protocol="SSH", commit="c0ffee")
    calls = fake_git.read_text().splitlines()[1:]
    assert calls[0].startswith("clone git@git.example.org:someone/models.git ")
    assert calls[1].endswith("checkout c0ffee")


def test_failed_clone_says_what_to_do(fake_git, home):
    with pytest.raises(hub.GitPullError) as info:
        hub.list("someone/fail")
    message = str(info.value)
    assert "Could not resolve host" in message and "pass its directory as repo_info" in message
    assert os.listdir(home / "hub") == []  # nothing cached, the temporary clone gone too


@pytest.mark.parametrize("kwargs, error", [
    ({"repo_info": "no-slash"}, hub.InvalidRepo),
    ({"repo_info": "a/b/c"}, hub.InvalidRepo),
    ({"repo_info": "a/b:"}, hub.InvalidRepo),
    ({"repo_info": "a/b", "git_host": "bad host"}, hub.InvalidGitHost),
    ({"repo_info": "a/b", "protocol": "FTP"}, hub.InvalidProtocol),
])
def test_malformed_arguments(home, kwargs, error):
    with pytest.raises(error):
        hub.list(**kwargs)
