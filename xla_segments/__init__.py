"""xla_segments: the compile layer. Compile pure array functions into XLA executables, keep and
load them, and describe them.

Pure jax, no Tensors. A `Segment` holds a function over arrays and its abstract inputs and
builds, on demand, the inference forward and, per gradient signature, the training forward
(outputs and residuals, from `jax.vjp`) and the backward (input gradients from residuals and
output cotangents). Each `Executable` reports its compile time, XLA's cost and memory analyses
and its HLO. How a segment is compiled (donation, shardings, XLA compiler options,
rematerialization) is one hashable `CompileOptions` value.

Executables are kept on disk by default (`set_cache_dir`, `cache_location.py`), verified before
they load (`store.py`), within a size limit (`set_cache_max_size`, `eviction.py`): a segment's
under a description of its jaxpr (`segment_store.py`), an eager op's under its name, attributes
and argument types (`kept.py`). The code map: `README.md` beside this file.
"""

from . import preload as _preload  # noqa: F401 - reads ahead what the last run used
from .cache_location import CacheDirError, CacheWarning, default_dir, set_cache_dir
from .cache_location import current as cache_dir
from .cache_stats import counts as cache_counts
from .cache_stats import recent_runs
from .compile_pool import threads as compile_threads
from .eviction import max_size as cache_max_size
from .eviction import set_max_size as set_cache_max_size
from .executable import Executable
from .kept import HIT_EVENT as KEPT_HIT_EVENT
from .kept import LOAD_EVENT as KEPT_LOAD_EVENT
from .kept import Kept, Persistent, kept_value
from .kept import own as own_kept_ops
from .kept import wrap as keep_jitted
from .options import REMAT_VALUES, CompileOptions, base_compile_options, quick_compile_options
from .per_rank import PerRank
from .segment import Segment, abstract
from .segment_store import SegmentStore
from .segment_store import for_program as store_for_program
from .segment_store import for_stretch as store_for_stretch

__all__ = ["Segment", "Executable", "CompileOptions", "PerRank", "abstract", "REMAT_VALUES",
           "set_cache_dir", "cache_dir", "default_dir", "CacheDirError", "CacheWarning",
           "set_cache_max_size", "cache_max_size", "cache_counts", "recent_runs",
           "Kept", "Persistent", "kept_value", "keep_jitted", "own_kept_ops", "KEPT_HIT_EVENT",
           "KEPT_LOAD_EVENT", "quick_compile_options", "base_compile_options", "SegmentStore",
           "store_for_program", "store_for_stretch", "compile_threads"]
