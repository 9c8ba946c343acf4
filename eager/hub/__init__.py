"""Models and weights from elsewhere, as MegEngine's `megengine.hub`: a repository's entries
(`list`, `help`, `load`, `import_module`), from a git repository or a local directory holding a
`hubconf.py`, and pretrained weights downloaded once into the cache (`pretrained`,
`load_serialized_obj_from_url`).

The cache is `$MGE_HOME`, else `$XDG_CACHE_HOME/megengine`, else `~/.cache/megengine`, as
MegEngine's. Without network access, a file placed by hand where `DownloadError`'s message says
is used, and a repository cloned by hand is used by passing its directory.

>>> import eager.hub as hub
>>> hub.list  # doctest: +ELLIPSIS
<function list at ...>
"""

from .exceptions import (
    DownloadError,
    FetcherError,
    GitCheckoutError,
    GitPullError,
    HubconfError,
    InvalidGitHost,
    InvalidProtocol,
    InvalidRepo,
)
from .hub import help, import_module, list, load, load_serialized_obj_from_url, pretrained

__all__ = [
    "help", "import_module", "list", "load", "load_serialized_obj_from_url", "pretrained",
    "DownloadError", "FetcherError", "GitCheckoutError", "GitPullError", "HubconfError",
    "InvalidGitHost", "InvalidProtocol", "InvalidRepo",
]
