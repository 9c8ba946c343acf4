"""`Module`: parameters, buffers and sub-modules found from attributes, with dotted names.

Attributes are scanned in sorted-name order, depth first, as MegEngine scans them (its state
dicts and optimizer checkpoints depend on that order); Tensors and Modules inside lists, tuples
and dicts count too (named `attr.0`, `attr.key`, dict keys sorted), and an object reachable
under two names is found once, under the first. A `Parameter` is a parameter, any other Tensor a
buffer. Setting a Tensor or Module attribute bumps `structure_version`; setting any attribute,
or changing training mode, bumps `eager.hooks.epoch()`, which a capture's guards watch.
"""

from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..core import context
from ..core.device import commit
from ..core.quantized_tensors import is_quantized, load_quantized
from ..core.tensors import Parameter, Tensor, _wrap, rebind
from ..serialization.layouts import per_channel
from .hooks import HookDict, HookHandler, run_with_hooks


def _is_state(v: Any) -> bool:
    return isinstance(v, (Tensor, Module))


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor)


def _is_parameter(v: Any) -> bool:
    return isinstance(v, Parameter)


def _is_buffer(v: Any) -> bool:
    return isinstance(v, Tensor) and not isinstance(v, Parameter)


def _is_module(v: Any) -> bool:
    return isinstance(v, Module)


class TensorList(list):
    """A list that is also an iterator over itself: MegEngine's `parameters()` is a generator
    (`next(net.parameters())`), while list code adds and indexes the results. `next()` walks a
    cursor of its own; `for` loops and indexing see the whole list every time."""

    _cursor = 0

    def __next__(self) -> Any:
        if self._cursor >= len(self):
            raise StopIteration
        self._cursor += 1
        return self[self._cursor - 1]


class Module:
    """Base class of layers and models: subclass it and define `forward`.

    >>> import eager as eg, eager.module as M
    >>> net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
    >>> [name for name, _ in net.named_parameters()]
    ['0.bias', '0.weight', '2.bias', '2.weight']
    >>> net(eg.ones((3, 4))).shape
    (3, 2)
    """

    training: bool  # set by `train()` / `eval()`, for this module and its sub-modules
    structure_version: int  # bumped when a Tensor or Module attribute is set
    # `disable_quantize()` sets it: `quantize_qat` then leaves the module in float (a class
    # default, so a module whose __init__ skips Module's has it too)
    quantize_disabled: bool = False

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "structure_version", 0)
        object.__setattr__(self, "_forward_pre_hooks", HookDict())
        object.__setattr__(self, "_forward_hooks", HookDict())
        if (h := context.current()) is not None:
            h.module_created(self)

    def __setattr__(self, name: str, value: Any) -> None:
        old = self.__dict__.get(name)
        if (h := context.current()) is not None:
            h.module_setattr(self, name, old, value)
        if _is_state(value) or _is_state(old) or isinstance(value, (list, tuple, dict)):
            version = self.__dict__.get("structure_version", 0) + 1
            object.__setattr__(self, "structure_version", version)
        object.__setattr__(self, name, value)
        context.bump_epoch()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __delattr__(self, name: str) -> None:
        old = self.__dict__.get(name)
        if (h := context.current()) is not None:
            h.module_setattr(self, name, old, None)
        object.__delattr__(self, name)
        version = self.__dict__.get("structure_version", 0) + 1
        object.__setattr__(self, "structure_version", version)
        context.bump_epoch()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if (h := context.current()) is not None:
            h.module_call(self)
        if self.__dict__.get("_forward_pre_hooks") or self.__dict__.get("_forward_hooks"):
            return run_with_hooks(self, self.forward, args, kwargs)
        return self.forward(*args, **kwargs)

    def register_forward_pre_hook(self, hook: Callable) -> HookHandler:
        """Run `hook(module, inputs)` before each `forward`; a result other than None replaces
        the inputs (a tuple, or one value). Returns a handle whose `remove()` unregisters it."""
        return HookHandler(self.__dict__.setdefault("_forward_pre_hooks", HookDict()), hook)

    def register_forward_hook(self, hook: Callable) -> HookHandler:
        """Run `hook(module, inputs, output)` after each `forward`; a result other than None
        replaces the output. Returns a handle whose `remove()` unregisters it."""
        return HookHandler(self.__dict__.setdefault("_forward_hooks", HookDict()), hook)

    # ----- discovery ------------------------------------------------------------------------
    def _items(self) -> Iterator[tuple[str, Any]]:
        """(dotted name, Tensor or Module) for the direct attributes, lists and dicts expanded,
        attributes in sorted-name order (MegEngine's)."""
        for name in sorted(self.__dict__):
            yield from _expand(name, self.__dict__[name])

    def _walk(self, prefix: str, recursive: bool,
              seen: dict[int, Any]) -> Iterator[tuple[str, Any, Module]]:
        """Every Tensor and Module below this module, depth first in sorted-name order, each
        once, under the first name it is reached by, with the module that holds it: MegEngine's
        order, which its state dicts and optimizer checkpoints (stored by position) depend on.
        `seen` maps the id of each object met to the object itself: holding it keeps the id
        from being reused while the walk runs, even if the caller changes the module between
        two steps of this generator."""
        for name, leaf in self._items():
            if id(leaf) in seen:
                continue
            seen[id(leaf)] = leaf
            full = f"{prefix}.{name}" if prefix else name
            yield full, leaf, self
            if recursive and isinstance(leaf, Module):
                yield from leaf._walk(full, recursive, seen)

    def _named(self, want: Callable[[Any], bool], prefix: str | None, recursive: bool,
               filters: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        for name, leaf, _ in self._walk(prefix or "", recursive, {id(self): self}):
            if want(leaf) and all(getattr(leaf, k, None) == v for k, v in filters.items()):
                yield name, leaf

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, Module) for the direct sub-modules, in sorted-name order."""
        return self._named(_is_module, None, False, {})

    def children(self) -> TensorList:
        return TensorList(m for _, m in self.named_children())

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """(dotted name, Module) for this module (named `prefix`) and every one below it, depth
        first in sorted-name order, each once."""
        yield prefix, self
        yield from self._named(_is_module, prefix, True, {})

    def modules(self) -> TensorList:
        return TensorList(m for _, m in self.named_modules())

    def named_parameters(self, prefix: str | None = None, recursive: bool = True,
                         **filters: Any) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter), each parameter once, in MegEngine's order (see `_walk`).
        `filters` keep the parameters whose attributes equal them (`requires_grad=True`)."""
        return self._named(_is_parameter, prefix, recursive, filters)

    def parameters(self, recursive: bool = True, **filters: Any) -> TensorList:
        """The parameters, as `named_parameters` orders and filters them: a list that is also
        an iterator, so MegEngine's `next(net.parameters())` and list code such as
        `a.parameters() + b.parameters()` both work."""
        return TensorList(p for _, p in self.named_parameters(None, recursive, **filters))

    def named_buffers(self, prefix: str | None = None, recursive: bool = True,
                      **filters: Any) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, Tensor) for tensors that are not Parameters (running statistics)."""
        return self._named(_is_buffer, prefix, recursive, filters)

    def buffers(self, recursive: bool = True, **filters: Any) -> TensorList:
        return TensorList(b for _, b in self.named_buffers(None, recursive, **filters))

    def named_tensors(self, prefix: str | None = None,
                      recursive: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, Tensor) for parameters and buffers together, in MegEngine's order: the
        order of `state_dict()`."""
        return self._named(_is_tensor, prefix, recursive, {})

    # ----- modes and state ------------------------------------------------------------------
    def train(self, mode: bool = True, recursive: bool = True) -> Module:
        """Set training mode on this module and, with `recursive`, on every sub-module; returns
        self. As in MegEngine, each sub-module in `modules()` order has its class's own `train`
        called where it overrides this one (with `recursive=False` where its signature takes
        it), so what an override does to its children is redone by their turns after it."""
        mode = bool(mode)
        self._set_training(mode)
        if recursive:
            for m in self.modules():
                if m is not self:
                    _train_one(m, mode)
        context.bump_epoch()
        return self

    def _set_training(self, mode: bool) -> None:
        """Set this module's own flag (a wrapper sets the module it wraps)."""
        object.__setattr__(self, "training", mode)

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        """Zero, in place, the gradient of every parameter that has one (MegEngine's; one
        without keeps None). Deprecated there since 1.0, as here: `optimizer.clear_grad()`
        drops the gradients instead."""
        warnings.warn("Module.zero_grad() is deprecated (as in MegEngine): call the "
                      "optimizer's clear_grad()", DeprecationWarning, stacklevel=2)
        for p in self.parameters():
            if p.grad is not None:
                p.grad.reset_zero()

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call `fn` on every sub-module, children before parents, then on self; returns self.

        Each module is visited once even when shared (re-initialising weights, for one).

        >>> import eager.module as M
        >>> seen = []
        >>> net = M.Sequential(M.Linear(2, 2), M.ReLU())
        >>> net.apply(lambda m: seen.append(type(m).__name__)) is net
        True
        >>> seen
        ['Linear', 'ReLU', 'Sequential']
        """
        seen: set[int] = set()

        def visit(m: Module) -> None:
            seen.add(id(m))
            for child in m.children():
                if id(child) not in seen:
                    visit(child)
            fn(m)

        visit(self)
        return self

    def disable_quantize(self, value: bool = True) -> Module:
        """Set `quantize_disabled` to `value` on this module and every one below it, so that
        `eager.quantization.quantize_qat` leaves them in float (MegEngine's: a model's
        classifier usually stays float); returns self."""
        def mark(m: Module) -> None:
            m.quantize_disabled = bool(value)

        return self.apply(mark)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set `requires_grad` on every parameter (False freezes them: a GradManager gives them
        no gradient); returns self."""
        for p in self.parameters():
            p.requires_grad = bool(requires_grad)
        return self

    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        """Parameters and buffers as numpy arrays, keyed by dotted name, in MegEngine's order
        and layouts (BatchNorm's per-channel tensors as (C,), as MegEngine stores them)."""
        return OrderedDict((name, owner._state_array(t))
                           for name, t, owner in self._walk("", True, {id(self): self})
                           if isinstance(t, Tensor))

    def _state_array(self, t: Tensor) -> np.ndarray:
        """How `state_dict()` stores this module's tensor `t`: as it is, unless a layer stores
        it in another layout (as MegEngine's do)."""
        return t.numpy()

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        """Copy values from `state` (name -> array or Tensor) into the parameters and buffers.

        Shapes must match, with one exception: a 1-d tensor of C elements also accepts an array
        of shape (1, C, 1, ..., 1), the layout in which MegEngine stores per-channel vectors
        (BatchNorm statistics and affine parameters, convolution biases), so MegEngine state
        dicts load. `state_dict()` keeps the 1-d shape. MegEngine's other layouts (grouped
        conv weights, flattened LayerNorm, packed RNN and attention weights) are converted and
        PyTorch's `num_batches_tracked` dropped, each layer its own (`_load_layouts`). With
        `strict`, missing or unexpected names raise `KeyError`.
        """
        state = dict(state)
        for prefix, m in self.named_modules():
            m._load_layouts(state, f"{prefix}." if prefix else "")
        own = dict(self.named_parameters()) | dict(self.named_buffers())
        with context.atomic():  # all loaded, or (Ctrl-C before it starts) none
            self._load(own, state, strict)

    def _load_layouts(self, state: dict[str, Any], prefix: str) -> None:
        """Convert, in `state`, this module's own entries (`prefix` + name) that another
        framework stores in a layout of its own (the rules: `eager.serialization.layouts`); a
        layer stored so overrides it. Here: PyTorch's `num_batches_tracked`, beside running
        statistics, which nothing here uses, is dropped."""
        if hasattr(self, "running_mean"):
            state.pop(f"{prefix}num_batches_tracked", None)

    @staticmethod
    def _load(own: dict[str, Tensor], state: dict[str, Any], strict: bool) -> None:
        if strict:
            missing, unexpected = own.keys() - state.keys(), state.keys() - own.keys()
            if missing or unexpected:
                raise KeyError(f"load_state_dict: missing keys {sorted(missing)}, "
                               f"unexpected keys {sorted(unexpected)}")
        for name, value in state.items():
            if name not in own:
                continue
            t = own[name]
            arr = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
            if per_channel(arr.shape, t.shape):
                arr = arr.reshape(t.shape)
            if arr.shape != t.shape:
                raise ValueError(f"load_state_dict: {name!r} has shape {arr.shape} in the state "
                                 f"but {t.shape} in the module")
            if t._qdtype is not None or is_quantized(arr.dtype):
                load_quantized(t, arr)
                continue
            # (a new array made from numpy, which t alone holds: updates may donate it)
            rebind(t, _wrap(commit(arr.astype(t.dtype), like=t._data)))

    def __repr__(self) -> str:
        kids = "".join(f"\n  ({n}): " + repr(c).replace("\n", "\n  ")
                       for n, c in self.named_children())
        return f"{type(self).__name__}({self._extra_repr()}{kids}{chr(10) if kids else ''})"

    def _extra_repr(self) -> str:
        return ""


def _train_one(m: Module, mode: bool) -> None:
    """Put one sub-module in `mode`: its own `train` where its class overrides Module's (called
    MegEngine's way, or PyTorch's `train(mode)` where it takes no `recursive`), else its flag."""
    own = type(m).train
    if own is Module.train:
        m._set_training(mode)
    elif "recursive" in inspect.signature(own).parameters:
        m.train(mode, recursive=False)
    else:
        m.train(mode)


def _expand(name: str, value: Any) -> Iterator[tuple[str, Any]]:
    if _is_state(value):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _expand(f"{name}.{i}", v)
    elif isinstance(value, dict):
        for k in sorted(value, key=str):
            yield from _expand(f"{name}.{k}", value[k])
