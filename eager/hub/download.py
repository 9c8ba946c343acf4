"""Downloading one file into the cache, whole or not at all, and the error that says where to
put it by hand when there is no network."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..core.user_frame import describe_location, user_location
from .const import HTTP_READ_TIMEOUT
from .exceptions import DownloadError

_CHUNK = 1 << 20


def download(url: str, path: str, caller: str) -> None:
    """Download `url` to `path`, raising `DownloadError` (which names `caller`) on failure.

    The bytes go to a temporary file beside `path`, renamed over it once complete: a download
    cut short (no network, Ctrl-C, a full disk) never leaves a partial file at `path`, which
    every later call would otherwise read as the weights.
    """
    try:
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part",
                                   dir=folder)
    except OSError as e:
        raise _failed(caller, url, path, e) from e
    try:
        with os.fdopen(fd, "wb") as out, _open(url) as response:
            shutil.copyfileobj(response, out, _CHUNK)
        os.replace(tmp, path)
    except (OSError, ValueError) as e:  # urllib's errors are OSErrors; a bad URL a ValueError
        raise _failed(caller, url, path, e) from e
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # gone already once renamed


def _open(url: str) -> Any:
    """A readable response for `url`; a URL without a scheme is a local file (MegEngine reads
    those too)."""
    if not urlparse(url).scheme:
        url = Path(url).expanduser().resolve().as_uri()
    request = urllib.request.Request(url, headers={"User-Agent": "eager.hub"})
    return urllib.request.urlopen(request, timeout=HTTP_READ_TIMEOUT)


def _failed(caller: str, url: str, path: str, cause: BaseException) -> DownloadError:
    return DownloadError(
        f"{caller}: cannot download {url} ({type(cause).__name__}: {cause}), called at "
        f"{describe_location(user_location())}. Without network access, download the file "
        f"elsewhere and place it at {path}: a file there is used as it is, with no network "
        f"access.")
