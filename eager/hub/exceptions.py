"""Errors of `eager.hub`, with MegEngine's `megengine.hub.exceptions` names where it has one.
Each message names the repository, entry or URL and says what to do."""

from __future__ import annotations

from ..core.errors import EagerError


class FetcherError(EagerError, RuntimeError):
    """Fetching a repository or a file failed (MegEngine's base class of its hub errors)."""


class InvalidRepo(FetcherError, ValueError):  # noqa: N818 - MegEngine's name
    """`repo_info` is neither `"owner/name[:branch]"` nor a local directory with a
    `hubconf.py`."""


class InvalidGitHost(FetcherError, ValueError):  # noqa: N818 - MegEngine's name
    """`git_host` is not a host name or an IPv4 address."""


class InvalidProtocol(FetcherError, ValueError):  # noqa: N818 - MegEngine's name
    """`protocol` is not "HTTPS" or "SSH"."""


class GitPullError(FetcherError):
    """`git clone` failed: no network, no such repository or branch, or no `git` command. The
    message carries git's own output and how to use a copy cloned by hand."""


class GitCheckoutError(FetcherError):
    """`git checkout` of the requested `commit` failed (no such commit in the repository)."""


class DownloadError(FetcherError):
    """A file (pretrained weights) could not be downloaded, e.g. without network access. The
    message names the URL and the exact cache path where a copy placed by hand is used."""


class HubconfError(EagerError, RuntimeError):
    """A repository's `hubconf.py` has no callable entry of the requested name, lacks a module
    its `dependencies` list names, or cannot be imported (one that imports `megengine` needs
    `partial.alias_megengine()`)."""
