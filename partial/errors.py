"""The errors of capture. Every one names the user's code (file and line where known) and says
what to do instead."""

from __future__ import annotations

import xla_segments


class TraceError(Exception):
    """Base class of every capture error raised by `partial_trace` and `xla_trace`."""


class ValueReadError(TraceError):
    """A tensor's value was read inside a region (`.item()`, `.numpy()`, `bool()`, `if x:`),
    where tensors stand for values that exist only when the compiled code runs."""


class UnsupportedArgumentError(TraceError, TypeError):
    """An argument of a traced function is of a type capture cannot key or pass."""


class UnsupportedOutputError(TraceError, TypeError):
    """A traced function returned something other than Tensors, containers and plain values."""


class ModuleRebindError(TraceError):
    """A region assigned a new Tensor or Module to a module attribute that holds model state."""


class UnsupportedInRegionError(TraceError):
    """A construct that cannot run inside this kind of region (e.g. `gm.backward` inside
    `partial_trace`)."""


class InvalidTensorError(TraceError):
    """A tensor created inside a region whose capture failed was used afterwards."""


class NotDifferentiableError(TraceError):
    """An `xla_trace` step was called while a GradManager records with one of its inputs
    attached: a whole step is not differentiable from outside."""


class CacheDirError(TraceError, xla_segments.CacheDirError):
    """The directory given to `set_cache_dir` (or `PARTIAL_CACHE_DIR`) cannot hold the persistent
    compilation cache: it cannot be created or written to, or it is not private to this user."""


class ExportError(TraceError):
    """`dump` or `export` cannot write this region as one inference program: it has graph
    breaks, it writes state back (a training step, BatchNorm in training mode), or it has not
    been called yet."""


class ExportFileError(ExportError, ValueError):
    """A file given to `partial.load` is not a dump written by `fn.dump`, was changed after it
    was written (its checksum or manifest no longer match), or has an unsupported format
    version."""
