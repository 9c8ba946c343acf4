"""Autodiff front-end (MegEngine's `megengine.autodiff`): `GradManager` (`grad_manager.py`),
custom `Function` nodes and `no_grad` (`function.py`).

>>> import eager as eg
>>> from eager.autodiff import GradManager
>>> w = eg.Parameter([1.0, 2.0])
>>> gm = GradManager().attach([w])
>>> with gm:
...     loss = (w * w).sum()
...     gm.backward(loss)
>>> w.grad.numpy().tolist()
[2.0, 4.0]
"""

from .function import Function, no_grad
from .grad_manager import GradManager, GradManagerGroup

__all__ = ["GradManager", "GradManagerGroup", "Function", "no_grad"]
