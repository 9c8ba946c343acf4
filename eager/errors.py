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
