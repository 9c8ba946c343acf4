"""The dispatcher's side of ragged tensors (`eager/core/ragged.py`): how an op whose inputs include
one runs, how selections make them, and how their exact arrays are materialized.

An op runs on the padded storage when its registered rule (`defop(..., ragged=...)`) allows it
and a shape check confirms that its output's axis 0 follows the ragged inputs' (broadcasting
against a dense operand whose axis 0 is the logical length, say, does not); the length is a
runtime input, so the program compiles per capacity. Otherwise it runs on the exact arrays: a
host copy of the valid rows where no gradient is needed on the CPU, else one small slicing
program per length; each such op is counted in `FALLBACKS` and logged once on the
`eager.ragged` logger, so a per-length compile is never silent.
"""

from __future__ import annotations

import functools as ft
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from xla_segments import kept_value

from . import ragged as _r
from . import tape
from . import tensors as _t
from .context import current
from .device import default as default_device
from .ops import OPS
from .ops.ragged_rules import HEAVY_ROWS, LOSS, MASKED, NONEMPTY, ROWS, SOURCE, WIDE_ROWS
from .ragged import host_length, value_read

log = logging.getLogger("eager.ragged")
FALLBACKS: Counter = Counter()  # op name -> calls that ran on exact arrays
_logged: set = set()
_PLANS: dict = {}  # call signature -> positions whose rows the output follows, or None
_MAX_PLANS = 4096


def is_ragged(x: Any) -> bool:
    return isinstance(x, _t.Tensor) and x._len is not None


# ----- running an op ------------------------------------------------------------------------
FORMS: dict[str, Any] = {}  # op name -> its own ragged dispatch (`ragged_forms.py`)


def dispatch(op: Any, key: tuple, inputs: Sequence) -> Any:
    """Run `op` (static attributes `key`) on `inputs`, some of them ragged."""
    form = FORMS.get(op.name)
    if form is not None and (out := form(op, key, inputs)) is not None:
        return out
    first = next(x for x in inputs if is_ragged(x))
    attrs = dict(key)
    kind = _r.kind_of(op, attrs, first._data.ndim)
    if op is OPS["reshape"]:
        key, kind = _reshape_rows(first, attrs["shape"], key)
    if kind is None:
        return _on_exact(op, key, inputs, "it works along the ragged axis")
    if kind == NONEMPTY:
        kind = MASKED
        if host_length(first) == 0:  # raises what the op raises on an empty array
            return _t.run_op(op, key, [materialize(x, op.name) if is_ragged(x) else x
                                       for x in inputs])
    inputs, follows = _lined_up(op, key, kind, inputs)
    if follows is None:
        return _on_exact(op, key, inputs, "its inputs do not line up along the ragged axis")
    if not follows:  # ragged sources read at given (checked) rows: the output is dense
        return _t.run_op(op, key, inputs)
    n = _common_length([inputs[i] for i in follows])
    if n is None:
        return _on_exact(op, key, inputs, "its ragged inputs differ in length")
    kind = ROWS if kind == SOURCE else kind
    if kind in (HEAVY_ROWS, WIDE_ROWS):
        key = key + _upto(inputs, follows, kind)
    out = _t.run_op(_r.variant(op, kind), key, (n, *inputs))
    if kind in (ROWS, HEAVY_ROWS, WIDE_ROWS):
        for o in out if op.multi_output else (out,):
            o._len = n
    return out


def _lined_up(op: Any, key: tuple, kind: str, inputs: Sequence) -> tuple[Sequence, Any]:
    """(inputs, the positions the output follows: `_plan`) after moving storages so that the
    op can run on them where that is possible (`_aligned`)."""
    skip = 1 if kind == SOURCE else 0
    inputs = _aligned(inputs, skip, False)
    follows = _plan(op, key, kind, inputs)
    if follows is None and (wider := _aligned(inputs, skip, True)) is not inputs:
        inputs, follows = wider, _plan(op, key, kind, wider)
    return inputs, follows


def _aligned(inputs: Sequence, skip: int, dense: bool) -> Sequence:
    """`inputs` with those from position `skip` on moved to one storage size where that lets
    the op run on the storage: ragged tensors whose storages differ but whose lengths agree
    (`labels` from one selection, `logits` from a concatenation), and with `dense` (tried when
    the op cannot run otherwise: it may read a length on the host) dense tensors of the same
    rank whose axis 0 is that length (a draw of `len(x)` rows)."""
    ragged = [x for x in inputs[skip:] if is_ragged(x)]
    if not ragged:
        return inputs
    ndim, top = ragged[0]._data.ndim, max(x._data.shape[0] for x in ragged)
    widen = [i for i in range(skip, len(inputs)) if dense and isinstance(inputs[i], _t.Tensor)
             and not is_ragged(inputs[i]) and inputs[i]._data.ndim == ndim
             and inputs[i]._data.shape[0] > 1]
    if all(x._data.shape[0] == top for x in ragged) and not widen:
        return inputs
    n = _common_length(ragged)
    if n is None:
        return inputs
    if widen:
        length = host_length(ragged[0]) if current() is None else None
        widen = [i for i in widen if inputs[i]._data.shape[0] == length]
        if not widen:
            return inputs
    out = list(inputs)
    for i in range(skip, len(out)):
        x = out[i]
        if (is_ragged(x) and x._data.shape[0] != top) or i in widen:
            out[i] = _t.run_op(OPS["ragged_fit"], (("rows", top),), (x,))
            out[i]._len = n
    return out


def _upto(inputs: Sequence, follows: tuple, kind: str) -> tuple:
    """The `upto` attribute of a HEAVY_ROWS or WIDE_ROWS op: the rows it runs on, when that is
    below the storage's size and eager code can read the length (inside a region it is traced
    and the op runs on the whole storage). HEAVY_ROWS: the capacity rung of the length, after
    one host read, worth it for an op whose rows cost far more than the read (RoI align on 1028
    padded RoIs of which 200 are real). WIDE_ROWS: a fine rung (`fine_capacity`) of a length
    already read (a matmul of 1081 rows in storage of 2048 runs on 1152)."""
    first = inputs[follows[0]]
    readable = (int,) if kind == WIDE_ROWS else (int, jax.Array)
    concrete = isinstance(first._len, readable) and not isinstance(first._len, jax.core.Tracer)
    n = host_length(first) if concrete else None
    if n is None:
        return ()
    full = first._data.shape[0]
    cap = max((_r.fine_capacity if kind == WIDE_ROWS else _r.capacity)(n, full), 1)
    return (("upto", (cap, follows)),) if cap < full else ()


def _reshape_rows(t: Any, shape: tuple, key: tuple) -> tuple[tuple, str | None]:
    """A reshape that keeps the ragged axis ((n, ...) -> (n, ...) or (-1, ...)): ROWS on the
    storage; one across it ((n, d) -> (n * d,)) needs the exact array."""
    size = int(np.prod(t._data.shape[1:]))
    if not shape or shape.count(-1) > 1 or (shape[0] == -1 and not size):
        return key, None
    known = int(np.prod([s for s in shape[1:] if s != -1]))
    n = host_length(t) if shape[0] != -1 else None  # shape[0] came from a read of the length
    if n is not None and shape[0] == n and -1 in shape[1:] and known:
        shape = (shape[0], *(size // known if s == -1 else s for s in shape[1:]))
    if (shape[0] == -1 or (n is not None and shape[0] == n)) \
            and -1 not in shape[1:] and int(np.prod(shape[1:])) == size:
        return (("shape", (-1, *shape[1:])),), ROWS
    return key, None


def _common_length(tensors: list) -> Any:
    """The length the given ragged inputs share; None when they differ."""
    n = tensors[0]._len
    for t in tensors[1:]:
        if t._len is n:
            continue
        if isinstance(n, jax.core.Tracer) or isinstance(t._len, jax.core.Tracer):
            value_read(t, "the sizes of two different data-dependent selections (to check "
                          "that they are equal)")
            return None
        if host_length(tensors[0]) != host_length(t):
            return None
    return n


def _plan(op: Any, key: tuple, kind: str, inputs: Sequence) -> tuple | None:
    """The positions of the ragged inputs whose rows the output follows (cached per call
    signature); None when the op cannot run on the storage."""
    sig = (op.name, key, kind, tuple(_signature(x) for x in inputs))
    plan = _PLANS.get(sig, False)
    if plan is False:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        if op.persist is None:  # a user's op: its function may close over anything
            plan = _check(op, key, kind, inputs)
        else:
            plan = kept_value("ragged plan", (op.persist, *sig[1:]),
                              lambda: _check(op, key, kind, inputs))
        _PLANS[sig] = plan
    return plan


def _signature(x: Any) -> Any:
    if isinstance(x, _t.Tensor):
        return (x._len is not None, x._data.shape, x._data.dtype)
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
    if isinstance(x, (np.ndarray, jax.Array)):
        return (None, x.shape, x.dtype)
    return type(x)


def _check(op: Any, key: tuple, kind: str, inputs: Sequence) -> tuple | None:
    ragged = [i for i, x in enumerate(inputs) if is_ragged(x)]
    if kind == MASKED:
        return (0,) if ragged == [0] and all(x is None for x in inputs[1:]) else None
    attrs = dict(key)
    if kind == LOSS:
        attrs["reduction"] = "none"
    fn = ft.partial(op._impl, **attrs)
    base = _out_shapes(fn, inputs, ())
    if base is None or any(not s for s in base):
        return None
    tracks = [(s[0] + 1, *s[1:]) for s in base]
    if kind == SOURCE and 0 in ragged:  # the first input may be read at given rows
        others = tuple(i for i in ragged if i)
        if others and _out_shapes(fn, inputs, others) == tracks:
            return others
        if _out_shapes(fn, inputs, (0,)) == base:
            return () if not others else None
    return tuple(ragged) if _out_shapes(fn, inputs, tuple(ragged)) == tracks else None


def _out_shapes(fn: Any, inputs: Sequence, grow: tuple) -> list | None:
    """The output shapes of `fn` on the inputs' storage, axis 0 of the inputs at positions
    `grow` one longer; None when that fails."""
    avals: list[Any] = []
    for i, x in enumerate(inputs):
        if isinstance(x, _t.Tensor):
            shape = x._data.shape
            if i in grow:
                shape = (shape[0] + 1, *shape[1:])
            avals.append(jax.ShapeDtypeStruct(shape, x._data.dtype))
        else:
            avals.append(np.asarray(x) if isinstance(x, (list, tuple)) else x)
    try:
        out = jax.eval_shape(fn, *avals)
    except Exception:  # noqa: BLE001  (any failure: the op does not run on this storage)
        return None
    return [tuple(o.shape) for o in jax.tree.leaves(out)]


def ragged_fallbacks() -> dict[str, int]:
    """How many calls of each op ran on the exact arrays of ragged tensors (compiled once per
    length) in this process: where a head still compiles per count (see `eg.set_ragged_buckets`).

    >>> import eager as eg
    >>> isinstance(eg.ragged_fallbacks(), dict)
    True
    """
    return dict(FALLBACKS)


def _on_exact(op: Any, key: tuple, inputs: Sequence, why: str) -> Any:
    exact = [materialize(x, op.name) if is_ragged(x) else x for x in inputs]
    FALLBACKS[op.name] += 1
    if op.name not in _logged:
        _logged.add(op.name)
        log.info("%s runs on the exact array of a ragged tensor (%s): it compiles once per "
                 "length", op.name, why)
    return _t.run_op(op, key, exact)


# ----- exact arrays ------------------------------------------------------------------------
def materialize(t: Any, what: str) -> Any:
    """A dense Tensor with the logical value of ragged `t` (and its gradient history): a host
    copy of the valid rows when no gradient is needed on the CPU (nothing compiles), else a
    slicing op compiled per length."""
    n = host_length(t)
    if n is None:
        value_read(t, f"{what} (it needs the exact size of a data-dependent selection)")
        raise TypeError(f"{what} needs the exact size of a data-dependent selection")
    data = t._data
    needs = (t._node is not None or t._tracked) and tape.is_recording()
    if current() is None and not needs and isinstance(data, jax.Array) \
            and data.committed and next(iter(data.devices())).platform == "cpu":
        return _t._wrap(jax.device_put(np.asarray(data)[:n], next(iter(data.devices()))))
    return _t.run_op(OPS["ragged_exact"], (("n", n),), (t,))


def exact_array(t: Any) -> Any:
    """The logical array of ragged `t` (`eager.read`)."""
    return _t.read(materialize(t, "reading its array"))


# ----- making ragged tensors ------------------------------------------------------------------
_per_capture: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_eager = threading.local()


def selections(h: Any) -> list:
    """The memo of mask selections, entries (mask array, its length, index arrays, their
    length), of the capture `h` (kept while it lives), or of this thread's eager code (`h`
    None: the last mask only)."""
    if h is None:
        memo = getattr(_eager, "memo", None)
        if memo is None:
            memo = _eager.memo = []
        return memo
    memo = _per_capture.get(h)
    if memo is None:
        memo = _per_capture[h] = []
    return memo


def index_tensors(coords: Sequence[np.ndarray], limit: int) -> list:
    """Int32 index tensors for host coordinates (one array per axis, each of length n), padded
    to the ladder's capacity with their first entry; exact arrays when ragged results are off."""
    n = len(coords[0])
    cap = _r.capacity(n, limit) if _r.enabled() else n
    hosts = []
    for c in coords:
        padded = np.empty(cap, np.int32)
        padded[:n] = c
        padded[n:] = c[0] if n else 0
        hosts.append(padded)
    out = [_t._wrap(a) for a in _on_device(hosts)]
    if _r.enabled():
        for t in out:
            t._len = n
    return out


def _on_device(hosts: list) -> list:
    """Host index arrays as committed device arrays (Note [committed arrays] in device.py), in
    one transfer where that is possible; through the capture's constants inside a region."""
    if current() is not None:
        return [_t.to_array(h) for h in hosts]
    dev = default_device() or (jax.devices()[0] if jax.device_count() == 1 else None)
    return jax.device_put(hosts, dev) if dev is not None else [_t.to_array(h) for h in hosts]


def rewrap(arrays: list, n: Any) -> list:
    """Index tensors again from the arrays and length of an earlier selection by one mask."""
    out = [_t._wrap(a) for a in arrays]
    for t in out:
        t._len = n
    return out


def device_index_tensors(mask: Any) -> list:
    """Index tensors for the true elements of the bool `mask`, at the fixed capacity
    `mask.size`, their length computed on the device: traced inside a region, a device scalar
    in eager code (read only when Python asks for the size). One program for every count."""
    size = int(np.prod(mask._data.shape))  # a ragged mask's storage: its padding never selects
    *coords, count = _t.apply(OPS["mask_indices"], mask, size=size)
    n = _t.read(count)
    for c in coords:
        c._len = n
    return coords


_t.above.dispatch_ragged = dispatch
_t.above.exact_array = exact_array
