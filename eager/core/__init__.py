"""The internals MegEngine keeps under `megengine.core` that MegEngine code reaches for:
`_config`, its execution settings."""

from . import _config as _config
