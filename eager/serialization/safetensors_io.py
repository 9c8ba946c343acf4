"""safetensors files: a flat dict of named arrays, as `safetensors.torch.save_file` and
Hugging Face write them, read into Tensors and written from a state dict. The format holds no
code (a JSON header, then raw little-endian bytes), so it needs no restricted reader; the
`safetensors` package parses it and checks every offset.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import jax.numpy as jnp
import numpy as np

from ..core.errors import CheckpointError
from ..core.tensors import Tensor, made
from .checkpoint_format import DTYPES

_CODES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32",
    "U16": "uint16", "U8": "uint8", "BOOL": "bool", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
_NAMES = set(_CODES.values())


def is_safetensors(head: bytes, size: int) -> bool:
    """Whether a file of `size` bytes that starts with `head` is a safetensors file: an 8-byte
    little-endian header length, then the header's JSON."""
    n = int.from_bytes(head[:8], "little")
    return len(head) >= 9 and 2 <= n <= size - 8 and head[8:9] == b"{"


def read(data: bytes) -> dict[str, Tensor]:
    """The tensors of the safetensors file whose bytes are `data`, by name, in file order."""
    import safetensors  # a dependency, imported only when a file needs it

    try:
        items = safetensors.deserialize(data)
    except Exception as e:  # noqa: BLE001  (SafetensorError, not exported by every version)
        raise CheckpointError(f"not a valid safetensors file: {e}") from None
    out = {}
    for name, info in items:
        dtype = DTYPES.get(_CODES.get(info["dtype"], ""))
        if dtype is None:
            raise CheckpointError(f"tensor {name!r} has the safetensors dtype {info['dtype']}, "
                                  f"which eg.load does not read; it reads {', '.join(_CODES)}")
        a = np.frombuffer(info["data"], dtype.newbyteorder("<")).reshape(info["shape"])
        out[name] = made(jnp.asarray(a.astype(dtype)))
    return out


def write(f: BinaryIO, obj: Any) -> None:
    """Write `obj`, a dict of names to Tensors or numpy arrays (a state dict), as safetensors."""
    from safetensors.numpy import save

    if not isinstance(obj, dict):
        raise TypeError(f"eg.save(format='safetensors'): safetensors holds a dict of named "
                        f"arrays (a state dict), got {type(obj).__name__}; save other objects "
                        "in eager's own format")
    arrays = {}
    for name, value in obj.items():
        a = value.numpy() if isinstance(value, Tensor) else value
        if not isinstance(name, str) or not isinstance(a, (np.ndarray, np.generic)):
            raise TypeError(f"eg.save(format='safetensors'): {name!r} holds a "
                            f"{type(value).__name__}; safetensors holds only arrays keyed by "
                            "str: save nested objects and plain values in eager's own format "
                            "(format='eager', or a path not ending in .safetensors)")
        a = np.asarray(a)
        if a.dtype.name not in _NAMES:
            raise TypeError(f"eg.save(format='safetensors'): {name!r} has dtype {a.dtype}, "
                            f"which safetensors does not hold; it holds {sorted(_NAMES)}")
        arrays[name] = np.ascontiguousarray(a)
    f.write(save(arrays))
