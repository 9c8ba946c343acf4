"""Fetching a git repository into the cache with the `git` command: `repo_info` parsed and
checked, the clone made in a temporary folder and moved into place once complete (a cut clone
leaves nothing a later call would take for the repository).

>>> parse_repo_info("MegEngine/Models:dev")
('MegEngine', 'Models', 'dev')
>>> is_valid_host("github.com"), is_valid_host("10.0.0.1"), is_valid_host("bad host")
(True, True, False)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile

from ..core.user_frame import describe_location, user_location
from .cache import hub_dir
from .const import DEFAULT_BRANCH_NAME, PROTOCOLS
from .exceptions import GitCheckoutError, GitPullError, InvalidGitHost, InvalidProtocol, InvalidRepo

_LABEL = r"[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"(?:{_LABEL}\.)+[a-z0-9][a-z0-9_-]{{0,61}}[a-z]", re.IGNORECASE)
_NAME = re.compile(r"[^/:\s]+")


def parse_repo_info(repo_info: str) -> tuple[str, str, str]:
    """(owner, name, branch) of `"owner/name[:branch]"`; the branch defaults to "master"."""
    spec, colon, branch = repo_info.partition(":")
    owner, _, name = spec.partition("/")
    if not (_NAME.fullmatch(owner) and _NAME.fullmatch(name) and (branch or not colon)
            and ":" not in branch):
        raise InvalidRepo(
            f"repo_info {repo_info!r} is invalid: give a git repository as "
            f"'owner/name[:branch]' (e.g. 'MegEngine/Models:master'), or a local directory "
            f"that holds a hubconf.py")
    return owner, name, branch or DEFAULT_BRANCH_NAME


def is_valid_host(host: str) -> bool:
    """Whether `host` is a domain name or a dotted IPv4 address."""
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts):
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return _DOMAIN.fullmatch(ascii_host) is not None


def check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise InvalidProtocol(f"protocol {protocol!r} is invalid: it must be one of "
                              f"{', '.join(PROTOCOLS)}")


def fetch_repo(git_host: str, repo_info: str, use_cache: bool, commit: str | None,
               protocol: str) -> str:
    """The cache folder holding `repo_info`'s files at `commit` (else its branch's head),
    cloned now unless `use_cache` and it is there already."""
    check_protocol(protocol)
    if not is_valid_host(git_host):
        raise InvalidGitHost(f"git_host {git_host!r} is not a host name or IPv4 address "
                             f"(e.g. 'github.com')")
    owner, name, branch = parse_repo_info(repo_info)
    key = f"{owner}_{name}_{branch.replace('/', '_')}" + (f"_{commit}" if commit else "")
    target = os.path.join(hub_dir(), "eager_" + hashlib.sha1(key.encode()).hexdigest()[:16])
    if use_cache and os.path.isdir(target):
        return target
    url = (f"https://{git_host}/{owner}/{name}.git" if protocol == "HTTPS"
           else f"git@{git_host}:{owner}/{name}.git")
    os.makedirs(hub_dir(), exist_ok=True)
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", dir=hub_dir())
    try:
        clone = os.path.join(work, "repo")
        if commit is None:
            _git(["clone", "--depth=1", "-b", branch, url], clone, GitPullError)
        else:
            _git(["clone", url], clone, GitPullError)
            _git(["checkout", commit], clone, GitCheckoutError)
        shutil.rmtree(os.path.join(clone, ".git"))
        shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(clone, target)
        except OSError:
            if not os.path.isdir(target):  # else another process moved its clone there first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _git(args: list[str], folder: str, error: type[GitPullError | GitCheckoutError]) -> None:
    """Run `git *args` (a clone into `folder`, other commands in it), raising `error`."""
    command = ["git", *args, folder] if args[0] == "clone" else ["git", "-C", folder, *args]
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")  # fail rather than wait for a password
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError:
        output, returncode = "no `git` command is installed", None
    else:
        output, returncode = done.stderr.strip(), done.returncode
    if returncode == 0:
        return
    raise error(
        f"eager.hub: `git {' '.join(args)}` failed, called at "
        f"{describe_location(user_location())}:\n{output}\nCheck repo_info "
        f"('owner/name[:branch]'), commit, git_host and protocol. Without network access, "
        f"clone the repository elsewhere, copy it here and pass its directory as repo_info.")
