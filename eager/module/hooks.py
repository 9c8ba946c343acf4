"""Forward hooks of modules, as MegEngine's and PyTorch's: a function run before a module's
`forward` (it may replace the inputs) or after it (it may replace the output), registered with
`Module.register_forward_pre_hook` / `register_forward_hook`, removed through the handle those
return. The zoo's spectral norm (BigGAN) recomputes a weight in a pre-hook."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any

_ids = itertools.count()


class HookHandler:
    """The handle of one registered hook: `remove()` unregisters it (once; later calls, or
    calls after the module is gone, do nothing)."""

    def __init__(self, hooks: MutableMapping[int, Callable], hook: Callable) -> None:
        self.id = next(_ids)
        hooks[self.id] = hook
        self._hooks = weakref.ref(hooks)

    def remove(self) -> None:
        hooks = self._hooks()
        if hooks is not None:
            hooks.pop(self.id, None)


class HookDict(dict):
    """A module's hooks by handle id (a dict subclass: a handle holds it by weak reference,
    which a plain dict does not allow)."""


def run_with_hooks(module: Any, forward: Callable, args: tuple, kwargs: dict) -> Any:
    """`forward(*args, **kwargs)` with the module's pre-hooks before it and hooks after it."""
    for hook in list(module._forward_pre_hooks.values()):
        changed = hook(module, args)
        if changed is not None:
            args = changed if isinstance(changed, tuple) else (changed,)
    out = forward(*args, **kwargs)
    for hook in list(module._forward_hooks.values()):
        changed = hook(module, args, out)
        if changed is not None:
            out = changed
    return out
