"""Checkpoints: `save` and `load` nested dicts, lists and tuples of tensors, numpy arrays and
plain Python values, in a format that runs no code on load (see `checkpoint_format`).

A save writes a temporary file of its own in the target's folder, named
`.<target>.<host>-<pid>-<random>.tmp`, flushes and fsyncs it, then renames it over the target
(`os.replace` is atomic): a reader sees the old file or the new one, never part of one, and of
writers racing on one path (threads or processes) the last to finish wins. A writer killed
mid-save (`kill -9`, power loss) leaves its temp behind; the next save to that path removes the
temps whose writer is gone, which the host and pid in their names tell.

`load` also reads what MegEngine and PyTorch write, telling the format by content: pickles
(`megengine.save`, PyTorch's legacy `torch.save`) through a restricted unpickler that runs no
code (`pickle_reader`), PyTorch's zip (`torch_reader`) and safetensors (`safetensors_io`);
`save(..., format="safetensors")` writes the last.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import secrets
import socket
import threading
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import CheckpointError
from ..core.tensor_methods import TensorMethods
from . import safetensors_io, torch_reader
from .checkpoint_format import MAX_DEPTH, read
from .checkpoint_format import write as _write
from .pickle_reader import is_pickle

__all__ = ["MAX_DEPTH", "load", "save"]

_TEMP = re.compile(r"(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-[0-9a-f]{16}\.tmp")
_LOCK = threading.Lock()  # orders creating a temp against another thread's sweep of stale ones
_WRITING: set[str] = set()  # the temps this process is writing now


def save(obj: Any, path: str | os.PathLike | BinaryIO, format: str | None = None) -> None:
    """Write `obj` (e.g. `{"model": net.state_dict(), "opt": opt.state_dict()}`) to `path`.

    `format` is `"eager"` (nested dicts, lists and tuples of tensors, arrays and plain values)
    or `"safetensors"` (a flat dict of named arrays such as a state dict, which PyTorch and
    Hugging Face read); None picks `"safetensors"` for a name ending in `.safetensors`.

    >>> import eager as eg, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "ckpt.eg")
    >>> eg.save({"w": eg.ones((2,)), "step": 3}, p)
    >>> eg.load(p)["step"]
    3
    """
    write = _writer(path, format)
    if hasattr(path, "write"):
        write(path, obj)
        return
    target = Path(path)
    _remove_stale_temps(target)
    tmp, fd = _create_temp(target)
    try:
        with open(fd, "wb") as f:
            write(f, obj)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:  # only once the temp is renamed or removed, so no sweep can take it while written
        with _LOCK:
            _WRITING.discard(str(tmp))
    _fsync_dir(target.parent)


def _writer(path: Any, format: str | None) -> Any:
    if format is None:
        name = getattr(path, "name", "") if hasattr(path, "write") else os.fspath(path)
        format = "safetensors" if str(name).endswith(".safetensors") else "eager"
    if format not in ("eager", "safetensors"):
        raise ValueError(f"eg.save: format must be 'eager' or 'safetensors', got {format!r}")
    return safetensors_io.write if format == "safetensors" else _write


def load(path: str | os.PathLike | BinaryIO, map_location: str | dict[str, str] | None = None
         ) -> Any:
    """Read a checkpoint written by `save`, by `megengine.save` or `torch.save` (state dicts,
    nested containers of tensors, arrays and numbers; MegEngine and PyTorch tensors load as
    Tensors) or a safetensors file (a dict of Tensors). Raises `CheckpointError` for anything
    else, and for a pickle naming any global but the few that rebuild arrays and tensors:
    loading never runs code from the file.

    `map_location` (MegEngine's and PyTorch's argument) puts the tensors on a device: a device
    name (`"cpu0"`), or a dict from the device a tensor was saved from to the one to load it
    on (`{"gpu0": "cpu0"}`); None loads them on the default device.
    """
    if hasattr(path, "read"):  # a file object: `hasattr` does not narrow the type for mypy
        obj = _load_from(path, getattr(path, "name", "<file>"))  # type: ignore[arg-type]
    else:
        with open(path, "rb") as f:  # a missing or unreadable path raises its own OSError
            obj = _load_from(f, os.fspath(path))
    return obj if map_location is None else _mapped(obj, map_location)


def _mapped(obj: Any, location: Any) -> Any:
    """`obj` with every tensor moved as `map_location` says."""
    if not isinstance(location, (str, dict)):
        raise TypeError(f"load: map_location must be a device name or a dict of device names, "
                        f"got {type(location).__name__}")
    if isinstance(obj, TensorMethods):
        target = location if isinstance(location, str) else location.get(obj.device)
        return obj if target is None else obj.to(target)
    if isinstance(obj, dict):
        return {k: _mapped(v, location) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_mapped(v, location) for v in obj)
    return obj


def _load_from(f: BinaryIO, name: Any) -> Any:
    try:
        size = f.seek(0, os.SEEK_END)  # bounds every size the file declares
        f.seek(0)
        return _read(f, size)
    except CheckpointError as e:
        raise CheckpointError(f"eg.load({name}): {e}") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, OverflowError, KeyError,
            IndexError, TypeError, RecursionError, AttributeError, NotImplementedError,
            pickle.UnpicklingError) as e:
        raise CheckpointError(f"eg.load({name}): not a readable checkpoint (eager's, a "
                              f"MegEngine or PyTorch file, safetensors), or truncated or "
                              f"corrupt: {e}") from e


def _read(f: BinaryIO, size: int) -> Any:
    """The object in `f`, of `size` bytes, in whichever format its first bytes show."""
    head = f.read(16)
    f.seek(0)
    if is_pickle(head):
        return torch_reader.read_pickle(f.read())
    if safetensors_io.is_safetensors(head, size):
        return safetensors_io.read(f.read())
    with zipfile.ZipFile(f) as z:
        prefix = torch_reader.zip_prefix(z)
        return read(z, size) if prefix is None else torch_reader.read_zip(z, prefix, size)


# ----- temporary files --------------------------------------------------------------------------
def _host_tag() -> str:
    """Who can judge a pid in a temp's name: this host and pid namespace (a container sharing
    the folder numbers its processes on its own)."""
    try:
        pid_namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_namespace = ""
    key = f"{socket.gethostname()}\0{pid_namespace}".encode()
    return hashlib.blake2s(key, digest_size=4).hexdigest()


def _temp_prefix(target: Path) -> str:
    # Cut a long name so the temp's own name stays within the usual 255-byte limit.
    return f".{os.fsdecode(os.fsencode(target.name)[:200])}."


def _create_temp(target: Path) -> tuple[Path, int]:
    """A new temp file next to `target`, opened for writing, and its file descriptor."""
    prefix = f"{_temp_prefix(target)}{_host_tag()}-{os.getpid()}-"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = target.with_name(f"{prefix}{secrets.token_hex(8)}.tmp")
        with _LOCK:
            try:
                fd = os.open(tmp, flags, 0o666)  # 0o666 less the umask, as open() gives
            except FileExistsError:
                continue
            _WRITING.add(str(tmp))
            return tmp, fd


def _remove_stale_temps(target: Path) -> None:
    """Remove the temps of `target` whose writer died mid-save: named by this host, with the
    pid of a process that is gone, or with this process's pid but not being written by it (a
    previous process that had the same pid)."""
    prefix, host, me = _temp_prefix(target), _host_tag(), os.getpid()
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    with _LOCK:
        for name in names:
            match = _TEMP.fullmatch(name, len(prefix)) if name.startswith(prefix) else None
            if match is None or match["host"] != host:
                continue
            tmp, pid = target.with_name(name), int(match["pid"])
            stale = str(tmp) not in _WRITING if pid == me else not _alive(pid)
            if stale:
                with contextlib.suppress(OSError):
                    tmp.unlink()


def _alive(pid: int) -> bool:
    """Whether process `pid` may still be writing; when unsure, yes."""
    if os.name == "nt":  # there os.kill(pid, 0) would send CTRL_C_EVENT, not probe
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OverflowError:  # no process has such a pid
        return False
    except OSError:  # PermissionError: alive, another user's
        return True
    return True


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
