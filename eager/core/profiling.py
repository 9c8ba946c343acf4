"""`eager.profile()`: where a step's time goes, split the way a user can act on it.

    with eager.profile() as prof:
        train_step()
    print(prof)

Every eager op, backward node, compiled segment call, host read and host-to-device copy made
inside the block is timed, and split into kinds: eager forward (op dispatch and its compute),
eager backward (the tape's nodes), compiled forward and compiled backward (`partial_trace`
segments and `xla_trace` steps), compile (jax's tracing, lowering and XLA compilation, wherever
it happens), host sync (`.numpy()`, `.item()`, `bool()`, ... and the wait for the value) and
transfer (host data becoming a tensor). Times are exclusive: a compile inside an op's first
call counts as compile, not as the op.

jax runs ops asynchronously; with `sync=True` (the default) the block starts once the work
dispatched before it has finished (the previous step's tail is not charged to its first op),
and each timed piece waits for its results, so its time is its own compute. `sync=False`
leaves the asynchrony as it is: ops then show their dispatch cost, and the wait for everything
before a host read shows as host sync, which is what an unprofiled step pays there.

Nothing is timed outside the block, and an unprofiled program pays one module-level check per
op. The profile of a thread is its own (`profile()` in another thread sees only that thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import jax

KINDS = ("eager forward", "eager backward", "compiled forward", "compiled backward", "compile",
         "host sync", "transfer")
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")

ON = 0  # how many profiles are open, in any thread: the hooks' one check when it is 0
_local = threading.local()
_lock = threading.Lock()
_listening = False


@dataclass
class Stat:
    """Calls and exclusive seconds of one kind, or of one name within a kind."""

    calls: int = 0
    seconds: float = 0.0


@dataclass
class Profile:
    """What `profile()` measured: `kinds` (kind -> Stat), `names` ((kind, name) -> Stat) and
    `wall` (the block's seconds). `str()` prints the split and the costliest names."""

    sync: bool = True
    kinds: dict[str, Stat] = field(default_factory=lambda: {k: Stat() for k in KINDS})
    names: dict[tuple[str, str], Stat] = field(default_factory=dict)
    wall: float = 0.0
    _frames: list[list] = field(default_factory=list, repr=False)  # [name, nested seconds]

    def add(self, kind: str, name: str, seconds: float, calls: int = 1) -> None:
        for stat in (self.kinds[kind], self.names.setdefault((kind, name), Stat())):
            stat.calls += calls
            stat.seconds += seconds

    def seconds(self, kind: str) -> float:
        return self.kinds[kind].seconds

    def other(self) -> float:
        """The block's seconds in none of the kinds: Python between ops, the user's own code."""
        return max(self.wall - sum(s.seconds for s in self.kinds.values()), 0.0)

    def table(self, top: int = 8) -> str:
        """The split by kind, then the `top` costliest names of each kind."""
        wall = self.wall or 1e-12
        rows = [f"{'kind':<18} {'calls':>7} {'seconds':>9} {'share':>6}"]
        for kind, stat in [*self.kinds.items(), ("other Python", Stat(0, self.other()))]:
            rows.append(f"{kind:<18} {stat.calls:>7} {stat.seconds:>9.4f} "
                        f"{stat.seconds / wall:>6.1%}")
        rows.append(f"{'wall':<18} {'':>7} {self.wall:>9.4f}")
        for kind in KINDS:
            named = sorted(((n, s) for (k, n), s in self.names.items() if k == kind),
                           key=lambda item: -item[1].seconds)[:top]
            if named:
                rows.append(f"\n{kind}: costliest")
                rows += [f"  {n[:40]:<40} {s.calls:>6} {s.seconds:>9.4f}" for n, s in named]
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()


def current() -> Profile | None:
    """This thread's open profile, or None."""
    return getattr(_local, "profile", None)


@contextmanager
def profile(sync: bool = True) -> Iterator[Profile]:
    """Time what runs in the block, split by kind (see the module docstring).

    >>> import eager as eg
    >>> with eg.profile() as prof:
    ...     y = (eg.tensor([1.0, 2.0]) * 3).sum().item()
    >>> prof.kinds["eager forward"].calls, prof.kinds["host sync"].calls
    (2, 1)
    """
    global ON
    if current() is not None:
        raise RuntimeError("eager.profile() is already open in this thread; nest no profiles.")
    _listen()
    prof = Profile(sync=sync)
    if sync:  # work dispatched before the block (the last step's tail) is not the block's
        jax.block_until_ready(jax.live_arrays())
    _local.profile = prof
    with _lock:
        ON += 1
    start = time.perf_counter()
    try:
        yield prof
    finally:
        prof.wall = time.perf_counter() - start
        _local.profile = None
        with _lock:
            ON -= 1


@contextmanager
def timed(kind: str, name: str, result: Any = None) -> Iterator[list]:
    """Time the block as `kind` / `name` in this thread's profile (a no-op without one).

    The block may append its outputs to the yielded list: with `sync`, they are waited for
    inside the timing. Time spent in nested `timed` blocks and compiles is theirs, not this
    block's."""
    prof = current()
    if prof is None:
        yield []
        return
    outs: list = []
    prof._frames.append([name, 0.0])
    start = time.perf_counter()
    try:
        yield outs
        if prof.sync and outs:
            jax.block_until_ready(outs)
    finally:
        elapsed = time.perf_counter() - start
        nested = prof._frames.pop()[1]
        prof.add(kind, name, max(elapsed - nested, 0.0))
        if prof._frames:
            prof._frames[-1][1] += elapsed


def run(kind: str, name: str, fn: Any, *args: Any) -> Any:
    """`fn(*args)`, timed as `kind` / `name` under `eager.profile()` (a plain call otherwise):
    how the compiled layers report their executables' calls."""
    if not ON:
        return fn(*args)
    with timed(kind, name) as got:
        got.append(fn(*args))
    return got[0]


def _on_duration(event: str, duration_secs: float, **_: str | int) -> None:
    """jax's compile events, from the thread that compiles: charged as compile of the op or
    segment being timed around it (one call per XLA compilation), and taken out of its time."""
    if event not in _COMPILE_EVENTS or (prof := current()) is None:
        return
    name = prof._frames[-1][0] if prof._frames else "outside ops"
    prof.add("compile", name, duration_secs, calls=int(event == _COMPILE_EVENTS[-1]))
    if prof._frames:
        prof._frames[-1][1] += duration_secs


def _listen() -> None:
    """Register the compile listener once per process (jax keeps listeners for good)."""
    global _listening
    with _lock:
        if not _listening:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _listening = True
