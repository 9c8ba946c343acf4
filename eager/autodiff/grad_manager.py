"""`GradManager` (MegEngine's `megengine.autodiff.grad_manager`): attach tensors, record the ops
on them, and accumulate their gradients; `GradManagerGroup` records several managers at once."""

from __future__ import annotations

import contextvars
import itertools
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import context, higher_order, tape
from ..core.device import grad_layout as _grad_layout
from ..core.errors import AttachError, BackwardError
from ..core.ops import OPS
from ..core.tensors import Tensor, _wrap, apply, peek
from .function import no_grad

# Per thread: when each manager recording now began (a number that only grows). MegEngine nests
# managers by that order: a manager's backward is recorded by the ones that began before it.
_OPEN: contextvars.ContextVar[tuple[int, ...]] = contextvars.ContextVar(
    "eager_open_managers", default=())
_starts = itertools.count()

Callback = Callable[[Tensor, Tensor], Tensor]


def _check_attachable(t: Any) -> None:
    if not isinstance(t, Tensor):
        raise AttachError(
            f"GradManager.attach takes Tensors, got {type(t).__name__}: {t!r:.60}")
    if not jnp.issubdtype(t.dtype, jnp.inexact):
        raise AttachError(
            f"GradManager.attach got a {t.dtype} tensor of shape {t.shape}: only floating "
            "(or complex) tensors have gradients; cast it first (t.astype('float32')) or "
            "leave it unattached")


def _wants_grad(t: Tensor) -> bool:
    """False for a tensor frozen with `t.requires_grad = False` (or `requires_grad_(False)`)."""
    return getattr(t, "_requires_grad", True)


def _as_list(x: Any) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


class GradManager:
    """Records the operations on attached tensors and computes their gradients.

    Attach tensors (parameters, or any tensor you want a gradient for) with `attach`; ops on them
    are recorded while the manager records (`record()` ... `release()`, or `with gm:`).
    `backward(y, dy)` computes the gradients, passes each through the tensor's callbacks in order,
    accumulates the result into `tensor.grad`, frees the recorded graph and stops recording.
    """

    def __init__(self) -> None:
        # id -> (weak reference, callbacks), in attach order. Weak, as in MegEngine: attaching
        # a model's parameters does not keep a model that is dropped alive. The reference's
        # callback removes the entry when the tensor dies, so the id is never taken for another.
        self._attached: dict[int, tuple[weakref.ref, list[Callback]]] = {}
        self._tracking: list[weakref.ref] = []  # the tensors record() marked, for release()
        self._recording = False
        self._start = -1  # when it last began recording (see `_OPEN`)
        self._freed_by_backward = False
        self._version = 0  # moves on every attach (and death)
        if (h := context.current()) is not None:
            h.manager_created(self)

    def attach(self, tensors: Tensor | Iterable[Tensor],
               callbacks: Callback | Sequence[Callback] | None = None) -> GradManager:
        """Track `tensors` (a Tensor or a list); `callbacks(tensor, grad) -> grad` run in order
        on each gradient before it is accumulated. Returns self. Tensors are held weakly."""
        ts = [tensors] if isinstance(tensors, Tensor) else _as_list(tensors)
        for t in ts:
            _check_attachable(t)
        self._version += 1
        for t in ts:
            entry = self._attached.get(id(t))
            if entry is None or entry[0]() is not t:
                self._attached[id(t)] = (weakref.ref(t, self._forget_callback()),
                                         list(_as_list(callbacks)))
                if self._recording and _wants_grad(t):
                    t._tracked += 1
                    self._tracking.append(weakref.ref(t))
            else:
                entry[1].extend(_as_list(callbacks))
        return self

    @property
    def version(self) -> tuple[int, int]:
        """Moves whenever what a backward of this manager differentiates may have changed: an
        attach, an attached tensor's death, any tensor frozen or unfrozen (`requires_grad`).
        Compiled steps that run this manager's backward compare it to re-check."""
        return self._version, tape.flags_epoch()

    def _forget_callback(self) -> Callable[[weakref.ref], None]:
        me = weakref.ref(self)  # the entry must not keep its manager alive either

        def forget(ref: weakref.ref) -> None:
            gm = me()
            if gm is None:
                return
            for key, entry in list(gm._attached.items()):
                if entry[0] is ref:
                    del gm._attached[key]
                    gm._version += 1

        return forget

    def _entries(self) -> list[tuple[Tensor, list[Callback]]]:
        """The live attached tensors with their callbacks, in attach order (a snapshot: a
        tensor that dies meanwhile cannot change the list being walked)."""
        out = []
        for ref, callbacks in list(self._attached.values()):
            t = ref()
            if t is not None:
                out.append((t, callbacks))
        return out

    def callbacks_of(self, tensor: Tensor) -> list[Callback] | None:
        """The callbacks attached with `tensor` (in order), or None when it is not attached."""
        entry = self._attached.get(id(tensor))
        return None if entry is None or entry[0]() is not tensor else list(entry[1])

    def attached_tensors(self) -> list[Tensor]:
        """The attached tensors that are still alive, in attach order."""
        return [t for t, _ in self._entries()]

    def record(self) -> None:
        """Start recording operations on attached tensors."""
        self._record(next(_starts))

    def _record(self, start: int) -> None:
        """`record()`, as having begun at `start`: the managers of a group share one, so that
        none of them records another's backward (MegEngine's group records as one)."""
        if self._recording:
            raise BackwardError("GradManager.record() called while it is already recording")
        with context.atomic():  # a signal's handler runs before or after, never half-way
            self._recording = True
            self._freed_by_backward = False
            self._start = start
            _OPEN.set((*_OPEN.get(), self._start))
            tape.change(recording=1)
            self._tracking = [weakref.ref(t) for t, _ in self._entries() if _wants_grad(t)]
            for ref in self._tracking:
                if (t := ref()) is not None:  # not collected since `_entries()` returned it
                    t._tracked += 1
            if (h := context.current()) is not None:
                h.recording(self, True)

    def release(self) -> None:
        """Stop recording (idempotent). Graph nodes die with the tensors that hold them."""
        with context.atomic():
            if not self._recording:
                return
            self._recording = False
            _OPEN.set(_without_one(_OPEN.get(), self._start))
            tape.change(recording=-1)
            for ref in self._tracking:
                if (t := ref()) is not None:
                    t._tracked -= 1
            self._tracking = []
            if (h := context.current()) is not None:
                h.recording(self, False)

    def _stop(self) -> None:
        """`release()`, even when a signal's handler raises as it begins (before its commit
        starts): it is finished, then the exception goes on. The next `with gm:` works."""
        try:
            self.release()
        finally:
            if self._recording:
                self.release()

    def __enter__(self) -> GradManager:
        return self._enter(next(_starts))

    def _enter(self, start: int) -> GradManager:
        already = self._recording
        try:
            self._record(start)
        except BaseException:  # a signal (or a capture's refusal) right after recording began:
            if not already:  # the `with` body never runs, so neither would __exit__
                self._stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop()

    def __or__(self, other: GradManager | GradManagerGroup) -> GradManagerGroup:
        """`gm1 | gm2`: a group whose `with` records both (MegEngine's GradManagerGroup)."""
        return GradManagerGroup([self]).merge_with(other)

    def backward(self, y: Tensor | Sequence[Tensor] | None = None,
                 dy: Tensor | Sequence[Tensor] | None = None) -> None:
        """Accumulate d(y)/d(attached) into each attached tensor's `.grad`, weighting by `dy`.

        `dy` may be omitted only when each `y` has exactly one element (it is then 1).
        """
        if not self._recording:
            if self._freed_by_backward:
                raise BackwardError(
                    "GradManager.backward() was already called in this recording: it freed the "
                    "recorded graph and stopped recording. To backward several losses, add them "
                    "and call backward once (or pass them all: backward([y1, y2], [dy1, dy2])); "
                    "to backward again, record anew and run the forward again"
                )
            raise BackwardError(
                "GradManager.backward() needs a recording manager: call it inside `with gm:` "
                "or between gm.record() and gm.release()"
            )
        h = context.current()
        if h is not None:
            h.backward(self, y, dy)
        ys, dys = _as_list(y), _as_list(dy)
        if dys and len(dys) != len(ys):
            raise ValueError(f"backward got {len(ys)} outputs but {len(dys)} output gradients")
        try:
            cts = [self._cotangent(t, dys[i] if dys else None) for i, t in enumerate(ys)]
            if self._nested():
                # a `dy` tensor keeps its history, so an outer manager differentiates through
                # it too (MegEngine's forward-mode emulation: d(x.grad)/d(dy))
                cts = [dys[i].reshape(ys[i].shape) if dys and isinstance(dys[i], Tensor)
                       else _wrap(c) for i, c in enumerate(cts)]
                leaves = higher_order.backward(ys, cts, self._start)
            else:
                # another manager still recording (`with gm1 | gm2:`) may backward the same
                # graph after this one, as MegEngine allows: it is freed by the last
                leaves = tape.backward(ys, cts, manager=self, free=len(_OPEN.get()) <= 1,
                                       start=self._start)
            self._accumulate(leaves)
        finally:
            self._freed_by_backward = True
            self._stop()

    def _nested(self) -> bool:
        """A manager that began recording before this one still records in this thread
        (MegEngine's nested GradManagers): this backward is recorded too, so that outer one can
        differentiate the gradients. A manager that began later does not see it."""
        if tape.state()[1]:
            return False
        return any(start < self._start for start in _OPEN.get())

    @staticmethod
    def _cotangent(y: Tensor, dy: Any) -> Any:
        if not isinstance(y, Tensor):
            raise TypeError(f"backward expects Tensors, got {type(y).__name__}")
        if dy is None:
            if y.size != 1:
                raise ValueError(
                    f"backward(y) without dy needs a one-element y, got shape {y.shape}; "
                    "pass dy (e.g. eg.ones_like(y)) or reduce y to a scalar first"
                )
            if context.current() is None and isinstance(y._data, jax.Array) \
                    and not isinstance(y._data, jax.core.Tracer):
                return _one(y.shape, y.dtype)
            return jnp.ones(y.shape, y.dtype)  # in a capture: part of the traced program
        ct = peek(dy) if isinstance(dy, Tensor) else jnp.asarray(np.asarray(dy), y.dtype)
        if tuple(ct.shape) != y.shape:
            if ct.size != y.size:
                raise ValueError(f"dy has shape {tuple(ct.shape)} but y has shape {y.shape}")
            ct = ct.reshape(y.shape)  # as MegEngine: a (1,) dy for a scalar y
        return ct

    def _accumulate(self, leaves: dict[int, list]) -> None:
        with context.atomic():  # every .grad written, or (Ctrl-C before) none
            self._accumulate_all(leaves)

    def _accumulate_all(self, leaves: dict[int, list]) -> None:
        for t, callbacks in self._entries():
            found = leaves.get(id(t))
            if found is None or found[0] is not t:
                continue
            grad = found[1]
            layout = _grad_layout(t)
            if isinstance(grad, Tensor):  # a recorded backward: keep the history
                for cb in callbacks:
                    grad = cb(t, grad)
                grad = grad if t.grad is None else t.grad + grad
                t.grad = grad if layout is None else _laid_out(grad, layout)
                continue
            grad = _wrap(grad)
            if callbacks and not found[2]:  # not already applied by a compiled segment
                with no_grad():
                    for cb in callbacks:
                        grad = cb(t, grad)
            old = t.grad
            if old is not None:
                with no_grad():
                    grad = old + grad
            if layout is not None:
                with no_grad():
                    grad = _laid_out(grad, layout)
            t.grad = grad


def _without_one(starts: tuple[int, ...], start: int) -> tuple[int, ...]:
    """`starts` less one occurrence of `start` (a group's managers share theirs)."""
    i = starts.index(start) if start in starts else len(starts)
    return starts[:i] + starts[i + 1:]


def _laid_out(grad: Tensor, layout: Any) -> Tensor:
    """`grad` laid out by `layout` (see `eager.device.set_grad_layout`)."""
    return apply(OPS["gradient_layout"], grad, sharding=layout)


class GradManagerGroup:
    """Managers that record together: `with gm1 | gm2:` enters them in order (each then
    backwards on its own, `gm1.backward(y)`, `gm2.backward(y)`) and releases them in reverse.
    As one recording: neither records the other's backward (as `with gm1: with gm2:` would,
    the outer one differentiating the inner one's gradients)."""

    def __init__(self, managers: Iterable[GradManager]) -> None:
        self._gms: list[GradManager] = list(managers)

    def merge_with(self, other: GradManager | GradManagerGroup) -> GradManagerGroup:
        """This group with `other`'s managers appended (itself, as MegEngine's)."""
        more = other._gms if isinstance(other, GradManagerGroup) else [other]
        for gm in more:
            if not isinstance(gm, GradManager):
                raise TypeError(f"only GradManagers join a group, got {type(gm).__name__}")
            if all(gm is not have for have in self._gms):
                self._gms.append(gm)
        return self

    __or__ = merge_with

    def __enter__(self) -> GradManagerGroup:
        before = [gm._recording for gm in self._gms]
        start = next(_starts)
        try:
            for gm in self._gms:
                gm._enter(start)
        except BaseException:  # those this block started stop again, whatever was interrupted
            for gm, was in reversed(list(zip(self._gms, before))):
                if not was:
                    gm._stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            for gm in reversed(self._gms):
                gm._stop()
        finally:  # a signal's handler raised between two of them: the rest stop too
            for gm in reversed(self._gms):
                if gm._recording:
                    gm._stop()


_ONES: dict = {}


def _one(shape: tuple, dtype: Any) -> Any:
    """The seed cotangent of a one-element loss: made once per shape, dtype and default device
    (creating it costs more than a small op's whole step; jax arrays are immutable)."""
    # jax's options are dynamic attributes of `jax.config`, which its annotations do not declare
    key = (shape, np.dtype(dtype), jax.config.jax_default_device)  # type: ignore[attr-defined]
    one = _ONES.get(key)
    if one is None:
        if len(_ONES) > 64:
            _ONES.clear()
        # a host array put on the device: jnp.ones would compile a program in every process
        one = _ONES[key] = jax.device_put(np.ones(shape, np.dtype(dtype)))
    return one


__all__ = ["GradManager", "GradManagerGroup"]
