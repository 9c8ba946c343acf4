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


class OpArgumentError(EagerError, ValueError):
    """An op was given arguments it cannot take: shapes that do not combine, a wrong dtype, a
    missing tensor, a bad attribute. The message names the op, the argument, what it got and
    what it needs."""


class OpTypeError(OpArgumentError, TypeError):
    """An op argument of the wrong kind (None or a string where a tensor is needed, an integer
    tensor where a float one is): also a `TypeError`, as Python's own type errors are."""


class OpIndexError(OpArgumentError, IndexError):
    """An index out of range (`x[10]` of 4 rows, a gather, embedding or class label past the
    end): also an `IndexError`, as in numpy and PyTorch."""


class AttachError(EagerError, TypeError):
    """`GradManager.attach` got something that cannot have a gradient: not a Tensor, or an
    integer or boolean tensor."""


class AllocationError(OpArgumentError, MemoryError):
    """A tensor too large for the device's memory was asked for (`eg.zeros((10**12,) * 2)`): it
    is refused before anything is allocated. Also a `MemoryError` and a `ValueError`."""
