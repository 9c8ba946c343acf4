"""`autocast` (MegEngine's `megengine.amp.autocast`): compute in float16 or bfloat16 where it
pays, by each op's rule (`Op.amp`, see `eager.core.amp_policy`), while a context is entered or a
decorated function runs."""

from __future__ import annotations

import functools as ft
from collections.abc import Callable
from typing import Any

from ..core.amp_policy import LOW_TYPES, state


class autocast:  # noqa: N801  (MegEngine's and PyTorch's spelling)
    """Compute the matmul class in `low_prec_dtype` and the rest in float32 (see `eager.amp`'s
    docstring), in this thread, while the context is entered or the decorated function runs.

    Args:
        enabled: False turns autocast off inside (for a region that must stay float32).
        low_prec_dtype: "float16" or "bfloat16" (MegEngine 1.13's name; `low_precision_type`,
            the name of earlier releases, is accepted too).
        high_prec_dtype: what the rest computes in: "float32", the only one supported.

    An instance entered as a context manager belongs to one thread at a time; as a decorator it
    enters a fresh one per call, so a decorated function may run in several threads.

    >>> import eager as eg
    >>> from eager import amp
    >>> @amp.autocast()
    ... def f(x):
    ...     return x @ x
    >>> f(eg.ones((2, 2))).dtype.name
    'float16'
    """

    def __init__(self, enabled: bool = True, low_prec_dtype: str = "float16",
                 high_prec_dtype: str = "float32", *, low_precision_type: str | None = None):
        low = low_prec_dtype if low_precision_type is None else low_precision_type
        if low not in LOW_TYPES:
            raise ValueError(f"autocast: low_prec_dtype must be one of {sorted(LOW_TYPES)}, "
                             f"got {low!r}")
        if high_prec_dtype != "float32":
            raise ValueError(f"autocast: high_prec_dtype must be 'float32', got "
                             f"{high_prec_dtype!r}: what is not in low precision computes in "
                             "float32 (float64 inputs stay float64)")
        self.enabled = bool(enabled)
        self.low_prec_dtype = self.low_precision_type = low
        self.high_prec_dtype = high_prec_dtype
        self._tokens: list = []

    def __enter__(self) -> autocast:
        low = LOW_TYPES[self.low_prec_dtype] if self.enabled else None
        self._tokens.append(state.set(low))
        return self

    def __exit__(self, *exc: Any) -> None:
        state.reset(self._tokens.pop())

    def __call__(self, fn: Callable) -> Callable:
        @ft.wraps(fn)
        def autocast_wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.enabled, self.low_prec_dtype):
                return fn(*args, **kwargs)

        return autocast_wrapper

    def __repr__(self) -> str:
        return f"autocast(enabled={self.enabled}, low_prec_dtype={self.low_prec_dtype!r})"


def autocast_dtype() -> str | None:
    """The low precision type autocast computes in, in this thread ("float16" or "bfloat16"),
    or None outside autocast (or inside `autocast(enabled=False)`)."""
    low = state.get()
    return None if low is None else low.name



__all__ = ["autocast", "autocast_dtype"]
