"""No public name is shadowed by an internal module of the same name (MegEngine's
`from megengine.jit import trace` must give the decorator, never a submodule), and every name
a package lists in `__all__` exists."""

import importlib
import pkgutil
import types

import pytest

# Modules spelled like a public name on purpose, as in MegEngine: `eager.tensor` imports as the
# module (`from eager.tensor import Tensor`) while `eg.tensor(...)` is the constructor; so do
# `eager.amp.autocast` (the class `amp.autocast`) and `eager.distributed.launcher`.
MEGENGINE_SPELLINGS = {("eager", "tensor"), ("eager.amp", "autocast"),
                       ("eager.distributed", "launcher")}
PACKAGES = ["eager", "eager.functional", "eager.module", "eager.optimizer", "eager.distributed",
            "eager.core.ops", "eager.serialization", "eager.data", "eager.data.dataset",
            "eager.data.transform", "eager.data.transform.vision", "eager.autodiff", "eager.amp",
            "eager.random", "eager.quantization", "partial", "xla_segments", "autograd_bridge"]


@pytest.mark.parametrize("name", PACKAGES)
def test_public_names_are_not_internal_modules(name):
    package = importlib.import_module(name)
    public = set(getattr(package, "__all__", ()))
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in public or (name, info.name) in MEGENGINE_SPELLINGS:
            continue
        value = getattr(package, info.name)
        # a public submodule (eager.random, F.nn, optim.lr_scheduler) is fine; a function or
        # class spelled like a module is what misleads
        assert isinstance(value, types.ModuleType), (
            f"{name}.{info.name} is both a public {type(value).__name__} and the module "
            f"{name}/{info.name}.py; rename the module")
    for attr in public:
        assert hasattr(package, attr), f"{name}.__all__ lists {attr!r}, which does not exist"


def test_f_nn_mirrors_every_flat_functional_name():
    import eager.functional as F

    flat = [n for n in F.__all__ if n not in ("nn", "loss", "vision")]
    assert len(flat) > 130
    for name in flat:
        assert getattr(F.nn, name) is getattr(F, name), name
    for space in (F.loss, F.vision):
        for name in space.__all__:
            assert getattr(space, name) is getattr(F, name), name


def test_eager_tensor_is_the_function_and_imports_as_the_module():
    import eager as eg
    from eager.tensor import Parameter, Tensor

    module = importlib.import_module("eager.tensor")
    assert isinstance(module, types.ModuleType) and module.Tensor is Tensor is eg.Tensor
    assert Parameter is eg.Parameter
    assert callable(eg.tensor) and not isinstance(eg.tensor, types.ModuleType)
    assert isinstance(eg.tensor([1.0]), Tensor)
