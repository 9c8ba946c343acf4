"""Eager ops' programs kept on disk: the compile layer's store of jitted programs
(`xla_segments.keep_jitted`), told here which package's source keys them and how to tell that
a capture is current (a call inside one traces through the plain jit)."""

from __future__ import annotations

from xla_segments import KEPT_HIT_EVENT as HIT_EVENT
from xla_segments import KEPT_LOAD_EVENT as LOAD_EVENT
from xla_segments import Kept, Persistent, own_kept_ops
from xla_segments import keep_jitted as wrap

from ..context import current

own_kept_ops(("eager",), lambda: current() is not None)

__all__ = ["HIT_EVENT", "LOAD_EVENT", "Kept", "Persistent", "wrap"]
