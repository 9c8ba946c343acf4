"""Exceptions raised by the eager engine. Each message names the thing and suggests the fix."""


class EagerError(Exception):
    """Base class of the eager engine's own errors."""


class BackwardError(EagerError, RuntimeError):
    """Autodiff misuse: backward over a freed graph, a missing `dy`, backward while not
    recording."""


class CheckpointError(EagerError, ValueError):
    """A file given to `eg.load` is not a checkpoint, is truncated, or holds unsupported data."""


class DeviceError(EagerError, ValueError):
    """An unknown device name."""


class DistributedError(EagerError, RuntimeError):
    """Distributed training misuse: a process group initialised twice or too late, a batch that
    does not split over the mesh, a port already in use."""


class WorkerError(DistributedError):
    """A worker process started by `dist.launcher` raised or died; the message carries its rank
    and its traceback."""
