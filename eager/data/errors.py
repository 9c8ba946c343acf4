"""Errors of `eager.data`. Each message names the thing and suggests the fix."""

from __future__ import annotations

from ..core.errors import EagerError


class DatasetNotFoundError(EagerError, FileNotFoundError):
    """A dataset's files are not where it looks for them. Nothing is downloaded here: the
    message names the dataset, the files it needs, the directory it looked in and the address to
    download them from by hand. Also a `FileNotFoundError`."""


class DataLoaderError(EagerError, RuntimeError):
    """A DataLoader's worker processes failed: one exited without finishing its batch (killed,
    out of memory, `os._exit`), or a worker's exception could not be sent back as itself (the
    message then carries the worker's traceback)."""


class DataLoaderTimeoutError(DataLoaderError, TimeoutError):
    """No batch came back within the DataLoader's `timeout`; the message names the worker
    process that holds the awaited batch, its pid and the batch's sample indices."""


class WorkerTraceback(Exception):  # noqa: N818 - not an error itself: the text of one
    """The traceback of an exception raised in a DataLoader worker process, as text: attached
    as the `__cause__` of the exception re-raised in the main process, so both tracebacks
    print."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\"\"\"\n{self.text}\"\"\""


class StreamDatasetError(EagerError, AssertionError, TypeError):
    """A `StreamDataset` was asked for its length or an item by index, which it does not
    have. An `AssertionError`, as MegEngine raises, and a `TypeError`, as Python's protocols
    expect (`list(stream)` asks for a length hint and goes on without one)."""


class TransformError(EagerError, ValueError):
    """A transform was built with, or given, something it cannot take: a bad `order`, a crop
    larger than the image, an image that is not (H, W, C). Also a `ValueError`, as MegEngine's
    checks raise."""


class UnsupportedError(TransformError, NotImplementedError):
    """A choice the transform does not implement: an `order` kind it has no `_apply_<kind>`
    method for, an unknown sample style. Also a `NotImplementedError`, as in MegEngine."""
