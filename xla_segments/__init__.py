"""xla_segments: compile pure array functions into XLA executables, and describe them.

Pure jax, no Tensors. A `Segment` holds a function over arrays and its abstract inputs and
builds, on demand, the inference forward and, per gradient signature, the training forward
(outputs and residuals, from `jax.vjp`) and the backward (input gradients from residuals and
output cotangents). Each `Executable` reports its compile time, XLA's cost and memory analyses
and its HLO. How a segment is compiled (donation, shardings, XLA compiler options,
rematerialization) is one hashable `CompileOptions` value.
"""

from .options import REMAT_VALUES, CompileOptions
from .per_rank import PerRank
from .segment import Executable, Segment, abstract

__all__ = ["Segment", "Executable", "CompileOptions", "PerRank", "abstract", "REMAT_VALUES"]
