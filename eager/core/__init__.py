"""The tensor core every public package of `eager` builds on: the Tensor, its methods and
indexing, the tape, contexts and hooks, devices, the op registry and dispatch, ragged storage,
op checks and errors (`README.md` in this folder maps it). Nothing here imports the public
packages above it (`functional`, `module`, `optimizer`, ...).

It is also MegEngine's `megengine.core` for the one thing MegEngine code reaches there:
`_config`, its execution settings.
"""

# `indexing`, `ragged_dispatch` and `quantized_tensors` give the Tensor what it reaches above itself
# (`tensors.above`): imported here, with the core, before any Tensor is made.
from . import _config as _config
from . import indexing as _indexing  # noqa: F401
from . import quantized_tensors as _quantized_tensors  # noqa: F401
from . import ragged_dispatch as _ragged_dispatch  # noqa: F401
