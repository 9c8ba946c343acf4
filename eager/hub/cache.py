"""Where `eager.hub` keeps what it fetches, as MegEngine does: under `$MGE_HOME`, else
`$XDG_CACHE_HOME/megengine`, else `~/.cache/megengine`; repositories in its `hub` folder,
downloaded files in its `serialized` folder, each file under its URL's base name prefixed with
the first six hex digits of the URL's SHA-256 (two URLs with one base name do not collide).

>>> cached_file("https://host/w/net.pkl", "/models")
'/models/005a5f_net.pkl'
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from urllib.parse import urlparse

from .const import DEFAULT_CACHE_DIR, ENV_MGE_HOME, ENV_XDG_CACHE_HOME


def megengine_home() -> str:
    """The cache directory (MegEngine's `MGE_HOME`, XDG cache rules otherwise), `~` expanded."""
    xdg = os.getenv(ENV_XDG_CACHE_HOME, DEFAULT_CACHE_DIR)
    return os.path.expanduser(os.getenv(ENV_MGE_HOME, os.path.join(xdg, "megengine")))


def hub_dir() -> str:
    """The folder that holds fetched repositories."""
    return os.path.join(megengine_home(), "hub")


def serialized_dir() -> str:
    """The folder that holds downloaded files when no `model_dir` is given."""
    return os.path.join(megengine_home(), "serialized")


def cached_file(url: str, model_dir: str | os.PathLike | None = None) -> str:
    """The path the file at `url` is downloaded to, and read from if it is already there."""
    folder = serialized_dir() if model_dir is None else os.fspath(model_dir)
    prefix = hashlib.sha256(url.encode()).hexdigest()[:6]
    name = posixpath.basename(urlparse(url).path)
    return os.path.join(os.path.expanduser(folder), f"{prefix}_{name}")
