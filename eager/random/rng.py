"""The generator (MegEngine's `megengine.random.rng`): one jax PRNG key held in a Tensor, the
module-level draws from it, and `RNG`, a generator with a key of its own."""

from __future__ import annotations

import contextvars
import functools as ft
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from ..core import ragged_forms
from ..core.errors import OpTypeError
from ..core.op_errors import bad_argument, checked_shape
from ..core.ops import OPS
from ..core.tensors import Tensor, apply, rebind

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from ..core.device import DeviceLike

Size = int | Sequence[int] | None  # a draw's shape: one length, one per axis, or () for None
_P = ParamSpec("_P")
_T = TypeVar("_T")

_key: Tensor | None = None
# The key of the `RNG` object drawing now, in this thread (None: the global generator's).
_drawing: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar("eager_rng", default=None)


def _state() -> Tensor:
    global _key
    if (own := _drawing.get()) is not None:
        return own
    if _key is None:
        _key = _new_key(secrets.randbits(31))
    return _key


def _new_key(n: int) -> Tensor:
    # the seed goes in as a (committed) tensor, so that the key and every draw from it are
    # committed like the rest of a step's arrays: Note [committed arrays] in device.py
    return apply(OPS["random_key"], Tensor(np.int32(n)))


def seed(n: int) -> None:
    """Reset the generator to a state determined by the integer `n`."""
    global _key
    new = _new_key(int(n) & 0x7FFFFFFF)
    if _key is None:
        _key = new
    else:
        rebind(_key, new)


def get_state() -> Tensor:
    """The Tensor holding the key (uint32, shape (2,)); capture lifts it like any tensor."""
    return _state()


def next_key() -> Tensor:
    """Advance the generator and return a fresh key to draw with."""
    key = _state()
    nxt, sub = apply(OPS["random_split"], key)
    rebind(key, nxt)
    return sub


def _shape(size: Any, dtype: Any = "float32") -> tuple[int, ...]:
    """`size` as a shape, refused with a clear error if it is negative or too large to hold.
    Draws call it before `next_key()`, so a refused draw leaves the generator as it was."""
    return () if size is None else checked_shape(size, dtype)


def normal(mean: float = 0.0, std: float = 1.0, size: Size = None,
           dtype: DTypeLike = "float32") -> Tensor:
    """Samples from N(mean, std^2) of shape `size`."""
    return _draw("random_normal", mean, std, size, dtype)


def uniform(low: float = 0.0, high: float = 1.0, size: Size = None,
            dtype: DTypeLike = "float32") -> Tensor:
    """Samples from U[low, high) of shape `size`."""
    return _draw("random_uniform", low, high, size, dtype)


def _draw(name: str, a: Any, b: Any, size: Any, dtype: DTypeLike) -> Tensor:
    """A draw of shape `size`. A size read from the data (a count tensor, a ragged tensor's
    length) gives a ragged draw at the count's capacity: its first `n` rows are the values a
    draw of exactly `n` rows gives (jax's draws are prefix-stable), and it compiles once per
    capacity, not once per count."""
    size = ragged_forms.count_of(size)
    shape = _shape(size, dtype)

    def make(storage: tuple) -> Tensor:
        return apply(OPS[name], next_key(), a, b, shape=storage, dtype=np.dtype(dtype))

    out = ragged_forms.made(size, lambda storage: make(_shape(storage, dtype)))
    return make(shape) if out is None else out


def permutation(n: int | Tensor, dtype: DTypeLike = "int32") -> Tensor:
    """A random permutation of range(n); for a Tensor `n`, a copy with its rows (axis 0) in a
    random order, as MegEngine's `permutation` (see `shuffle` for the in-place form)."""
    if isinstance(n, Tensor):
        return _shuffled(n, "permutation")
    (n,) = _shape(n, dtype)
    return apply(OPS["random_permutation"], next_key(), n=n, dtype=np.dtype(dtype))


def shuffle(x: Tensor) -> None:
    """Put the rows (axis 0) of `x` in a random order, in place (MegEngine's and numpy's
    `shuffle`: it returns None). `x` is rebound like `x[i] = v`, so gradients and captures
    follow it."""
    new = _shuffled(x, "shuffle")
    rebind(x, new, new._node, new._out_idx)


def _shuffled(x: Any, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise bad_argument(f"{name}: expects a Tensor, got {type(x).__name__}; wrap it with "
                           "eg.tensor(...)", OpTypeError)
    if x.ndim == 0:
        raise bad_argument(f"{name}: a 0-d tensor has no axis 0 to shuffle; reshape it first")
    return apply(OPS["random_shuffle"], next_key(), x)


def randint(low: int | Tensor, high: int | Tensor | None = None, size: Size = None,
            dtype: DTypeLike = "int32") -> Tensor:
    """Integers drawn uniformly from [low, high), or from [0, low) without `high` (numpy's
    `randint`), of shape `size`.

    >>> import eager as eg
    >>> sorted(set(eg.random.randint(3, size=(100,)).tolist()))
    [0, 1, 2]
    """
    if high is None:
        low, high = 0, low
    for arg, v in (("low", low), ("high", high)):
        if not isinstance(v, (int, np.integer, Tensor)) or isinstance(v, bool):
            raise bad_argument(f"randint: {arg} must be an int or a Tensor, got {v!r:.40}",
                               OpTypeError)
    if np.dtype(dtype).kind not in "iu":
        raise bad_argument(f"randint: dtype must be an integer type, got {np.dtype(dtype)}",
                           OpTypeError)
    if not isinstance(low, Tensor) and not isinstance(high, Tensor) and not low < high:
        raise bad_argument(f"randint: needs low < high, got low={low}, high={high}")
    shape = _shape(size, dtype)
    return apply(OPS["random_randint"], next_key(), low, high, shape=shape,
                 dtype=np.dtype(dtype))


def gamma(shape: float | Tensor, scale: float | Tensor = 1, size: Size = None,
          dtype: DTypeLike = "float32") -> Tensor:
    """Samples from the Gamma distribution with shape k and scale theta (mean k * theta). Of
    shape `size` for number parameters; with tensor parameters, of shape `size +
    broadcast(shape, scale).shape` (MegEngine's rule)."""
    out = _draw_shape("gamma", {"shape": shape, "scale": scale}, size, dtype)
    return apply(OPS["random_gamma"], next_key(), _param(shape), _param(scale), shape=out,
                 dtype=np.dtype(dtype))


def beta(alpha: float | Tensor, beta: float | Tensor, size: Size = None,
         dtype: DTypeLike = "float32") -> Tensor:
    """Samples from the Beta(alpha, beta) distribution on (0, 1); shapes as in `gamma`."""
    out = _draw_shape("beta", {"alpha": alpha, "beta": beta}, size, dtype)
    return apply(OPS["random_beta"], next_key(), _param(alpha), _param(beta), shape=out,
                 dtype=np.dtype(dtype))


def poisson(lam: float | Tensor, size: Size = None, dtype: DTypeLike = "float32") -> Tensor:
    """Counts drawn from Poisson(lam), as float32 like MegEngine's (pass `dtype="int32"` for
    integers); shapes as in `gamma`."""
    out = _draw_shape("poisson", {"lam": lam}, size, dtype, minimum=0.0)
    return apply(OPS["random_poisson"], next_key(), _param(lam), shape=out, dtype=np.dtype(dtype))


def _param(x: Any) -> Any:
    """A number parameter as a Python float: `gamma(2)` and `gamma(2.0)` share one compiled
    draw (the value is an input, not part of the program)."""
    return float(x) if _number(x) else x


def _number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _draw_shape(name: str, params: dict[str, Any], size: Any, dtype: Any,
                minimum: float | None = None) -> tuple[int, ...]:
    """The shape of a draw: `size` followed by the broadcast shape of the parameters. Number
    parameters must be > 0 (>= `minimum` where given); tensors are not read to check."""
    for arg, v in params.items():
        if isinstance(v, Tensor):
            continue
        if not _number(v):
            raise bad_argument(f"{name}: {arg} must be a number or a Tensor, got "
                               f"{type(v).__name__}", OpTypeError)
        if not (v >= minimum if minimum is not None else v > 0):
            bound = f">= {minimum:g}" if minimum is not None else "> 0"
            raise bad_argument(f"{name}: {arg} must be {bound}, got {v}")
    shapes = {arg: v.shape for arg, v in params.items() if isinstance(v, Tensor)}
    try:
        tail = np.broadcast_shapes(*shapes.values())
    except ValueError:
        raise bad_argument(f"{name}: the parameters' shapes do not broadcast: " + ", ".join(
            f"{arg} {shape}" for arg, shape in shapes.items())) from None
    return checked_shape(_shape(size, dtype) + tail, dtype)


def get_rng_state() -> Tensor:
    """A copy of the generator's state (uint32, shape (2,)); `set_rng_state` of it makes the
    draws that followed it happen again (PyTorch's names).

    >>> import eager as eg
    >>> state = eg.random.get_rng_state()
    >>> a = eg.random.normal(size=(3,))
    >>> eg.random.set_rng_state(state)
    >>> bool((eg.random.normal(size=(3,)) == a).numpy().all())
    True
    """
    return _state().clone()


def set_rng_state(state: Any) -> None:
    """Restore the generator to `state` (what `get_rng_state` returned: a Tensor, or its
    numpy value)."""
    t = state if isinstance(state, Tensor) else Tensor(np.asarray(state))
    if t.shape != (2,) or t.dtype.kind not in "iu":
        raise bad_argument(f"set_rng_state: expects the uint32 array of shape (2,) that "
                           f"get_rng_state() returned, got {t.dtype} of shape {t.shape}")
    rebind(_state(), t.astype(np.uint32))


def _drawn(fn: Callable[_P, _T]) -> Callable[Concatenate[RNG, _P], _T]:
    """The module function `fn` as a method of `RNG`, drawing from that generator's key."""
    @ft.wraps(fn)
    def method(self: RNG, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        token = _drawing.set(self._key)
        try:
            return fn(*args, **kwargs)
        finally:
            _drawing.reset(token)

    return method


class RNG:
    """A generator of its own (MegEngine's `random.RNG`): the same draws as the module's
    functions, from a key this object holds, so they neither use nor advance the global one.

    >>> import eager as eg
    >>> a, b = eg.random.RNG(seed=7), eg.random.RNG(seed=7)
    >>> bool((a.normal(size=(3,)) == b.normal(size=(3,))).numpy().all())
    True
    """

    def __init__(self, seed: int | None = None, device: DeviceLike = None):
        n = secrets.randbits(31) if seed is None else int(seed) & 0x7FFFFFFF
        self._key = _new_key(n) if device is None else _new_key(n).to(device)

    normal, uniform, permutation, shuffle = (_drawn(normal), _drawn(uniform),
                                             _drawn(permutation), _drawn(shuffle))
    randint, gamma, beta, poisson = _drawn(randint), _drawn(gamma), _drawn(beta), _drawn(poisson)


__all__ = ["seed", "get_state", "next_key", "normal", "uniform", "permutation", "shuffle",
           "randint", "gamma", "beta", "poisson", "get_rng_state", "set_rng_state", "RNG"]
