"""MegEngine's `megengine.tensor` module, for ported code: `from eager.tensor import Tensor`
(13 of MegEngine's own test files import it so).

`eg.tensor` stays the constructor function: the package imports this module first and then
binds the name `tensor` to the function, as MegEngine's package does, so the module is reached
through the import system (`sys.modules["eager.tensor"]`) and the attribute is the function.

>>> from eager.tensor import Parameter, Tensor
>>> import eager as eg
>>> isinstance(eg.tensor([1.0]), Tensor) and callable(eg.tensor)
True
"""

from .core.creation import tensor
from .core.tensors import Parameter, Tensor

__all__ = ["Parameter", "Tensor", "tensor"]
