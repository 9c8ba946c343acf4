"""`Identity`: returns its input (MegEngine's `megengine.module.identity`)."""

from __future__ import annotations

from .activation import _activation

Identity = _activation("Identity", lambda x: x, "Returns its input.")
