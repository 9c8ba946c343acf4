"""MegEngine's hub functions: a repository's entries (`list`, `help`, `load`, `import_module`)
from a git repository or, unlike MegEngine, a local directory, and pretrained weights from a URL
(`load_serialized_obj_from_url`, the `pretrained` decorator)."""

from __future__ import annotations

import builtins
import functools as ft
import inspect
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..serialization.files import load as _load_file
from .cache import cached_file
from .const import DEFAULT_GIT_HOST, DEFAULT_PROTOCOL, HUBCONF, HUBDEPENDENCY
from .download import download
from .exceptions import HubconfError, InvalidRepo
from .fetcher import check_protocol, fetch_repo
from .tools import check_module_exists, load_hubconf

RepoInfo = str | os.PathLike


def _repo_dir(repo_info: RepoInfo, git_host: str, use_cache: bool, commit: str | None,
              protocol: str) -> str:
    """The folder holding the repository: `repo_info` itself when it is a local directory,
    else the cache's clone of the git repository it names."""
    check_protocol(protocol)
    local = os.path.expanduser(os.fspath(repo_info))
    if os.path.isdir(local):
        if commit is not None:
            raise InvalidRepo(f"eager.hub: commit={commit!r} applies to a git repository, and "
                              f"{local} is a local directory, used as it is: drop commit=")
        return os.path.abspath(local)
    if not isinstance(repo_info, str):
        raise InvalidRepo(f"eager.hub: {local} is not a directory")
    return fetch_repo(git_host, repo_info, use_cache, commit, protocol)


def import_module(repo_info: RepoInfo, git_host: str = DEFAULT_GIT_HOST, use_cache: bool = True,
                  commit: str | None = None, protocol: str = DEFAULT_PROTOCOL) -> ModuleType:
    """The repository's `hubconf.py`, imported as a module.

    Args:
        repo_info: a git repository, `"owner/name[:branch]"` (branch "master" by default), or
            a local directory that holds a `hubconf.py` (MegEngine takes only the former).
        git_host: the git server, e.g. "github.com".
        use_cache: reuse the clone in the cache if there is one, else clone afresh.
        commit: check out this commit (git repositories only).
        protocol: "HTTPS" or "SSH", how `git clone` reaches the server.

    Raises:
        InvalidRepo, InvalidGitHost, InvalidProtocol: a malformed argument.
        GitPullError, GitCheckoutError: the clone failed (no network: clone it by hand and pass
            its directory).
    """
    return load_hubconf(_repo_dir(repo_info, git_host, use_cache, commit, protocol))


def list(repo_info: RepoInfo, git_host: str = DEFAULT_GIT_HOST, use_cache: bool = True,
         commit: str | None = None, protocol: str = DEFAULT_PROTOCOL) -> builtins.list[str]:
    """The entries of the repository: the callable names of its `hubconf.py` not starting
    with "__", in sorted order (arguments as for `import_module`)."""
    hubconf = import_module(repo_info, git_host, use_cache, commit, protocol)
    return [name for name in dir(hubconf)
            if not name.startswith("__") and callable(getattr(hubconf, name))]


def _entry(hubconf: ModuleType, entry: str) -> Callable[..., Any]:
    fn = getattr(hubconf, entry, None)
    if not callable(fn):
        raise HubconfError(f"eager.hub: {HUBCONF} ({hubconf.__file__}) has no callable "
                           f"{entry!r}; `eager.hub.list(repo_info)` lists its entries")
    return fn


def load(repo_info: RepoInfo, entry: str, *args: Any, git_host: str = DEFAULT_GIT_HOST,
         use_cache: bool = True, commit: str | None = None, protocol: str = DEFAULT_PROTOCOL,
         **kwargs: Any) -> Any:
    """Call the repository's entry `entry` with `*args, **kwargs` and return what it builds
    (a model, with pretrained weights when the entry is given `pretrained=True`).

    Before the call, every module the hubconf's `dependencies` list names must be importable.
    Other arguments as for `import_module`. Raises `HubconfError` for a missing entry or
    dependency.
    """
    hubconf = import_module(repo_info, git_host, use_cache, commit, protocol)
    fn = _entry(hubconf, entry)
    missing = [m for m in getattr(hubconf, HUBDEPENDENCY, None) or () if not check_module_exists(m)]
    if missing:
        raise HubconfError(f"eager.hub.load: {entry!r} needs the modules {', '.join(missing)}, "
                           f"which are not installed ({HUBCONF}'s `{HUBDEPENDENCY}`)")
    return fn(*args, **kwargs)


def help(repo_info: RepoInfo, entry: str, git_host: str = DEFAULT_GIT_HOST,
         use_cache: bool = True, commit: str | None = None,
         protocol: str = DEFAULT_PROTOCOL) -> str | None:
    """The docstring of the repository's entry `entry` (None if it has none); arguments as
    for `import_module`."""
    return _entry(import_module(repo_info, git_host, use_cache, commit, protocol), entry).__doc__


def load_serialized_obj_from_url(url: str, model_dir: str | os.PathLike | None = None) -> Any:
    """The object saved in the file at `url` (a state dict, usually), read with `eager.load`,
    which runs no code from the file (a pickle naming anything but arrays and tensors is
    refused with `CheckpointError`).

    The file is downloaded once into `model_dir` (default: the cache's `serialized` folder,
    see `MGE_HOME`), named by the URL's base name with a prefix from the URL's hash, and read
    from there afterwards with no network access. Raises `DownloadError`, naming that path,
    when it is not there and cannot be downloaded: a copy placed there by hand is used.
    """
    path = cached_file(url, model_dir)
    if not os.path.exists(path):
        download(url, path, "eager.hub.load_serialized_obj_from_url")
    return _load_file(path)


def pretrained(weight_url: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a model constructor with a `pretrained=False` argument: given
    `pretrained=True`, the model it builds gets the weights at `weight_url` (downloaded once,
    see `load_serialized_obj_from_url`) through `load_state_dict`.

    As in MegEngine, the decorated constructor takes its own arguments by keyword only;
    `pretrained` may also come first by position.

    >>> import eager.module as M
    >>> @pretrained("https://example.com/weights/linear_3_2.pkl")
    ... def linear(**kwargs):
    ...     "A small linear layer."
    ...     return M.Linear(3, 2, **kwargs)
    >>> linear.__name__, linear.__doc__, str(inspect.signature(linear))
    ('linear', 'A small linear layer.', '(pretrained: bool = False, **kwargs)')
    >>> linear(bias=False).bias is None
    True
    """
    def decorate(build: Callable[..., Any]) -> Callable[..., Any]:
        @ft.wraps(build)
        def build_pretrained(pretrained: bool = False, **kwargs: Any) -> Any:
            model = build(**kwargs)
            if pretrained:
                model.load_state_dict(load_serialized_obj_from_url(weight_url))
            return model

        build_pretrained.__signature__ = _with_pretrained(build)  # type: ignore[attr-defined]
        return build_pretrained
    return decorate


def _with_pretrained(build: Callable[..., Any]) -> inspect.Signature:
    """`build`'s signature as the decorated constructor takes it: `pretrained` first, then
    `build`'s parameters by keyword."""
    flag = inspect.Parameter("pretrained", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                             default=False, annotation=bool)
    kept = [flag]
    for p in inspect.signature(build).parameters.values():
        if p.name == "pretrained" or p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
            continue
        kept.append(p if p.kind == p.VAR_KEYWORD else p.replace(kind=p.KEYWORD_ONLY))
    return inspect.Signature(kept)
