"""Parity cases for `megengine.hub`: the `pretrained` decorator (the keyword it adds, the name and
docstring it keeps, weights loaded with `pretrained=True`), where `load_serialized_obj_from_url`
looks for a file (`MGE_HOME`, else `XDG_CACHE_HOME/megengine`, else `model_dir`; named by the
URL's base name after the first six hex digits of the URL's SHA-256), and the exception classes
of malformed `repo_info`, `git_host` and `protocol`. Every file is placed in the cache first, so
neither side touches the network.

MegEngine behaviour measured here and not copied (so left out of the cases):
- A local directory as `repo_info`: MegEngine 1.13 takes only git repositories
  (`"owner/name[:branch]"`), and `hub.list("/some/dir")` raises its `InvalidRepo`
  ("repo_info: '/some/dir' is invalid."). Here a directory that holds a `hubconf.py` is used
  as it is (tests/eager/test_hub.py); an absent path raises `InvalidRepo` on both sides.
- The HTTPS protocol: MegEngine downloads the branch's zip archive with `requests`; here
  `git clone` fetches it (both keep no `.git`). The SSH protocol clones on both sides.
- A missing entry or a missing dependency: `RuntimeError` in MegEngine, `HubconfError` (also a
  `RuntimeError`) here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import tempfile
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import numpy as np
from parity_cases import case, data

URL = "https://models.example.com/weights/linear_3_2_0a1b2c3d.pkl"


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """The environment variables set (None: unset) inside the block, restored after it."""
    before = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _cache_name(url: str) -> str:
    """MegEngine's file name for `url`'s file, computed here independently of either side."""
    return hashlib.sha256(url.encode()).hexdigest()[:6] + "_" + posixpath.basename(
        urlparse(url).path)


def _place(folder: str, url: str, state: dict) -> None:
    import megengine as mge

    os.makedirs(folder, exist_ok=True)
    mge.save(state, os.path.join(folder, _cache_name(url)))


def _linear_state() -> dict:
    return {"weight": data(2, 3, seed=3), "bias": data(2, seed=4)}


def _linear_constructor() -> Any:
    import megengine.hub as hub
    import megengine.module as M

    @hub.pretrained(URL)
    def linear(**kwargs: Any) -> Any:
        """A 3-to-2 linear layer."""
        return M.Linear(3, 2, **kwargs)

    return linear


@case()
def hub_pretrained_adds_the_keyword() -> dict:
    linear = _linear_constructor()
    with tempfile.TemporaryDirectory() as home, _environment(MGE_HOME=home):
        plain = linear()
        keyword = linear(pretrained=False, bias=False)
        positional = linear(False, bias=False)  # MegEngine's first positional argument
        downloaded = os.path.exists(os.path.join(home, "serialized"))
    try:
        linear(False, 3)
        raised = ""
    except TypeError as e:  # the constructor's own arguments go by keyword only
        raised = type(e).__name__
    return {"name": linear.__name__, "doc": linear.__doc__,
            "weight_shape": list(plain.weight.shape), "bias": [keyword.bias is None,
                                                               positional.bias is None],
            "downloaded": downloaded, "positional_args": raised}


@case()
def hub_pretrained_loads_the_weights_from_mge_home() -> dict:
    linear = _linear_constructor()
    with tempfile.TemporaryDirectory() as home, _environment(MGE_HOME=home):
        _place(os.path.join(home, "serialized"), URL, _linear_state())
        net = linear(pretrained=True)
        files = sorted(os.listdir(os.path.join(home, "serialized")))
    return {"weight": net.weight.numpy(), "bias": net.bias.numpy(), "files": files}


@case()
def hub_cache_under_xdg_cache_home_without_mge_home() -> dict:
    import megengine.hub as hub

    url = "https://models.example.com/other/state.pkl"
    with tempfile.TemporaryDirectory() as xdg, _environment(MGE_HOME=None, XDG_CACHE_HOME=xdg):
        _place(os.path.join(xdg, "megengine", "serialized"), url, {"x": data(4, seed=5)})
        got = hub.load_serialized_obj_from_url(url)
    return {"x": np.asarray(got["x"])}


@case()
def hub_load_serialized_obj_from_model_dir() -> dict:
    import megengine.hub as hub

    url = "https://models.example.com/v2/state.pkl?token=1"  # the query is not in the name
    with tempfile.TemporaryDirectory() as folder:
        _place(folder, url, {"a": data(2, 2, seed=6), "step": 7})
        got = hub.load_serialized_obj_from_url(url, model_dir=folder)
    return {"a": np.asarray(got["a"]), "step": got["step"]}


@case()
def hub_malformed_arguments_raise_the_hub_errors() -> dict:
    import megengine.hub as hub
    from megengine.hub.exceptions import FetcherError

    calls = {"no_slash": lambda: hub.list("abc"),
             "absent_path": lambda: hub.list("/no/such/directory/anywhere"),
             "bad_host": lambda: hub.list("a/b", git_host="bad host"),
             "bad_protocol": lambda: hub.load("a/b", "entry", protocol="FTP")}
    raised = {}
    with tempfile.TemporaryDirectory() as home, _environment(MGE_HOME=home):
        for name, call in calls.items():
            try:
                call()
                raised[name] = "nothing"
            except FetcherError as e:
                raised[name] = type(e).__name__
    return raised
