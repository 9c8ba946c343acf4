"""The settings `eager.hub` shares with MegEngine's `megengine.hub`: the names of a repository's
entry file and its dependency list, the defaults of `load`/`list`/`help`, and the environment
variables that choose the cache directory."""

from __future__ import annotations

DEFAULT_BRANCH_NAME = "master"  # the branch fetched when `repo_info` names none
HUBCONF = "hubconf.py"  # the file of a repository that defines its entries
HUBDEPENDENCY = "dependencies"  # hubconf's list of the modules its entries need
DEFAULT_GIT_HOST = "github.com"
DEFAULT_PROTOCOL = "HTTPS"
PROTOCOLS = ("HTTPS", "SSH")
ENV_MGE_HOME = "MGE_HOME"  # the cache directory itself, when set
ENV_XDG_CACHE_HOME = "XDG_CACHE_HOME"  # else the cache is its `megengine` folder
DEFAULT_CACHE_DIR = "~/.cache"  # where XDG_CACHE_HOME points when it is not set
HTTP_READ_TIMEOUT = 120  # seconds a download may wait for the server
