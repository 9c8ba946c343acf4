"""The quantized dtypes (MegEngine's `megengine.core.tensor.dtype`, quantized part): numpy integer
dtypes carrying MegEngine's metadata (C name, scale, zero point). Defined in the core
(`eager/core/quant_dtype.py`), since every Tensor's `qparams` needs them.

>>> get_zero_point(quint8(0.1, 128))
128
"""

from ..core.tensor.dtype import *  # noqa: F403  (the one list: MegEngine's path holds it)
from ..core.tensor.dtype import __all__ as __all__
from ..core.tensor.dtype import _builtin_quant_dtypes as _builtin_quant_dtypes
