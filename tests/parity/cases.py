"""Parity cases, written once against MegEngine 1.13's API and run unchanged in real MegEngine
and in this project (`aliases.py` serves `megengine*` there).

Each case returns a dict of results: numpy arrays, numbers, strings, nested lists and dicts of
them. `runner.py` runs every case on one side and writes what it returned, or what it raised.
This file imports nothing of the project and runs on MegEngine's Python (3.10, numpy < 1.24).

`@case(...)` options: `rtol` / `atol` for the float comparison; `megengine_aborts`: real
MegEngine kills the process on this input (an assertion in its worker thread), so it is not run
there and the case only has to raise here; `megengine_bug`: MegEngine 1.13 computes this wrong
on the CPU (the text says what): the case returns `{"got": ..., "want": ...}`, `want` an
independent reference computed in the case, and the test checks that this project's `got`
matches it and MegEngine's does not (the evidence, kept; it fails once MegEngine is fixed);
`megengine_unreliable`: MegEngine 1.13's value is sometimes right and sometimes garbage, even
in a fresh process (the text says which kernel): the case returns `{"got": ..., "want": ...}`,
`want` an independent reference computed in the case from the framework's own forward values,
and the test checks that this project's `got` matches its `want` and that both sides' `want`
agree (MegEngine's `got` is a coin and is not compared); `isolated`: MegEngine's result
depends on what ran before it in the process (a kernel reads memory it never wrote), so the
runner gives the case a process of its own on both sides.

Cases on other topics live in the `cases_*.py` files beside this one; they import `case` and
the helpers from `parity_cases` (this module, under a name that is the same whether it was
imported as a script's neighbour or as `tests.parity.cases`), and `load_all()` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

CASES: dict[str, Callable[[], dict]] = {}
OPTIONS: dict[str, dict] = {}


def case(rtol: float = 1e-5, atol: float = 1e-6, megengine_aborts: bool = False,
         megengine_bug: str = "", megengine_unreliable: str = "",
         isolated: bool = False) -> Callable:
    def register(fn: Callable[[], dict]) -> Callable[[], dict]:
        CASES[fn.__name__] = fn
        OPTIONS[fn.__name__] = {"rtol": rtol, "atol": atol, "megengine_aborts": megengine_aborts,
                                "megengine_bug": megengine_bug,
                                "megengine_unreliable": megengine_unreliable,
                                "isolated": isolated}
        return fn
    return register


def load_all() -> dict[str, Callable[[], dict]]:
    """Every case: this file's and those of the `cases_*.py` files beside it."""
    import importlib.util
    import sys
    from pathlib import Path

    sys.modules.setdefault("parity_cases", sys.modules[__name__])
    for path in sorted(Path(__file__).parent.glob("cases_*.py")):
        name = f"parity_{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    return CASES


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).standard_normal(shape).astype("float32")


def finite_difference(loss: Callable, x: np.ndarray, points: list) -> np.ndarray:
    """Central differences of `loss` (numpy in, float out) at the given flat positions: the
    independent reference of a `megengine_bug` case about a gradient."""
    out = []
    for i in points:
        hi, lo = x.copy(), x.copy()
        hi.flat[i] += 1e-2
        lo.flat[i] -= 1e-2
        out.append((loss(hi) - loss(lo)) / 2e-2)
    return np.array(out, "float32")


def grads(fn: Callable, *arrays: np.ndarray) -> tuple[Any, list]:
    """fn(*tensors) and the gradient of its sum with respect to every input."""
    import megengine as mge
    from megengine.autodiff import GradManager

    xs = [mge.tensor(a) for a in arrays]
    gm = GradManager().attach(xs)
    with gm:
        y = fn(*xs)
        gm.backward(y.sum())
    return y.numpy(), [x.grad.numpy() for x in xs]


# ----- silent wrong results the parity run found ------------------------------------------------
@case()
def gather_negative_axis() -> dict:
    import megengine as mge
    import megengine.functional as F

    idx = mge.tensor(np.array([[0, 3], [1, 2], [2, 0]], dtype="int32"))
    y, (g,) = grads(lambda x: F.gather(x, -1, idx), data(3, 4))
    return {"y": y, "grad": g}


@case()
def topk_default_order() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(np.array([2.0, 4.0, 1.0, 3.0], dtype="float32"))
    values, indices = F.topk(x, 2)
    low, low_idx = F.topk(x, 2, descending=False)
    return {"values": values.numpy(), "indices": indices.numpy(), "low": low.numpy(),
            "low_indices": low_idx.numpy()}


@case()
def nested_managers_inner_backward_is_not_recorded() -> dict:
    """The manager entered later does not record the earlier one's backward."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(np.array([0.5, 1.0, -2.0], dtype="float32"))
    gm, gm2 = GradManager().attach([x]), GradManager().attach([x])
    with gm2, gm:
        y = F.cos(x)
        gm2.backward(y, F.ones_like(y))
        gm.backward(x.grad, F.ones_like(x))
    return {"x.grad": x.grad.numpy()}


@case()
def nested_managers_forward_mode() -> dict:
    """Forward-mode emulation: the outer manager differentiates the inner backward by dy."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(np.array([0.5, 1.0, -2.0], dtype="float32"))
    dy = F.ones_like(x)
    outer, inner = GradManager().attach([dy]), GradManager().attach([x])
    with outer:
        with inner:
            y = F.cos(x)
            inner.backward(y, dy)
        outer.backward(x.grad, F.ones_like(x))
    return {"x.grad": x.grad.numpy(), "dy.grad": dy.grad.numpy()}


@case()
def second_order_gradient() -> dict:
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(np.array([0.3, -1.2, 2.0], dtype="float32"))
    outer, inner = GradManager().attach([x]), GradManager().attach([x])
    with outer:
        with inner:
            y = (F.sin(x) * x ** 2).sum()
            inner.backward(y)
        g = x.grad
        x.grad = None
        outer.backward(g.sum())
    return {"d2": x.grad.numpy()}


@case()
def flatten_axis_out_of_range_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"shape": list(F.flatten(mge.tensor(data(3, 4)), 3).shape)}


@case(megengine_aborts=True)
def one_hot_label_out_of_range_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.one_hot(mge.tensor(np.array([0, 5], dtype="int32")), 3).numpy()}


@case()
def batchnorm_tracking_switched_on_later_raises() -> dict:
    import megengine as mge
    import megengine.module as M

    bn = M.BatchNorm2d(3, track_running_stats=False)
    bn.track_running_stats = True
    return {"y": bn(mge.tensor(data(2, 3, 4, 4))).numpy()}


# ----- MegEngine code that failed here -----------------------------------------------------------
@case()
def logsoftmax_spelling() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(2, 3, 4))
    return {"F": F.logsoftmax(x, axis=1).numpy(), "F.nn": F.nn.logsoftmax(x, axis=2).numpy()}


@case()
def split_into_uneven_parts() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    for total, n in ((7, 3), (16, 5), (6, 3)):
        parts = F.split(mge.tensor(np.arange(total, dtype="float32")), n)
        out[f"{total}/{n}"] = [p.numpy() for p in parts]
    return out


@case()
def split_into_more_parts_than_elements_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"parts": len(F.split(mge.tensor(np.arange(2, dtype="float32")), 3))}


@case()
def softmax_over_several_axes() -> dict:
    import megengine.functional as F

    y, (g,) = grads(lambda x: F.softmax(x, axis=[0, 2]) * x, data(2, 3, 4))
    return {"y": y, "grad": g}


@case()
def transpose_with_new_axes() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(2, 3))
    return {"x10": F.transpose(x, ("x", 1, 0)).numpy(), "1x0": F.transpose(x, (1, "x", 0)).numpy()}


@case()
def pad_modes_in_either_case() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(np.arange(6, dtype="float32").reshape(2, 3))
    return {mode: F.nn.pad(x, ((1, 1), (2, 0)), mode).numpy()
            for mode in ("CONSTANT", "constant", "REFLECT", "reflect", "REPLICATE", "replicate")}


@case()
def backward_of_a_scalar_with_a_one_element_dy() -> dict:
    import megengine as mge
    from megengine.autodiff import GradManager

    x = mge.tensor(np.array([1.0, 2.0], dtype="float32"))
    gm = GradManager().attach([x])
    with gm:
        gm.backward((x * x).sum(), mge.tensor(np.array([2.0], dtype="float32")))
    return {"x.grad": x.grad.numpy()}


@case()
def managers_recording_as_a_group() -> dict:
    import megengine as mge
    from megengine.autodiff import GradManager

    a = mge.tensor(np.array([1.0], dtype="float32"))
    b = mge.tensor(np.array([3.0], dtype="float32"))
    g1, g2 = GradManager().attach([a]), GradManager().attach([b])
    with g1 | g2:
        g1.backward(a * 2)
        g2.backward(b * 3)
    first = (a.grad.numpy(), b.grad.numpy())
    with g1 | g2:
        g1.backward(a * b)
        g2.backward(b * a * 2)
    return {"first": list(first), "a.grad": a.grad.numpy(), "b.grad": b.grad.numpy()}


# ----- what users do daily ----------------------------------------------------------------------
@case()
def elementwise_values_and_grads() -> dict:
    import megengine.functional as F

    out = {}
    for name, fn in {"exp": F.exp, "tanh": F.tanh, "sigmoid": F.sigmoid, "relu": F.relu,
                     "gelu": F.gelu, "softplus": F.softplus, "abs": F.abs}.items():
        y, (g,) = grads(fn, data(4, 5, seed=1))
        out[name], out[name + ".grad"] = y, g
    return out


@case()
def reductions_and_softmax() -> dict:
    import megengine.functional as F

    out = {}
    for name, fn in {"sum": lambda x: F.sum(x, axis=1, keepdims=True),
                     "mean": lambda x: F.mean(x, axis=0),
                     "max": lambda x: F.max(x, axis=1),
                     "var": lambda x: F.var(x, axis=1),
                     "softmax": lambda x: F.softmax(x, axis=1),
                     "logsumexp": lambda x: F.logsumexp(x, axis=1),
                     "norm": lambda x: F.norm(x, ord=2, axis=1)}.items():
        y, (g,) = grads(fn, data(3, 6, seed=2))
        out[name], out[name + ".grad"] = y, g
    return out


@case()
def matmul_conv_pool() -> dict:
    import megengine.functional as F

    out = {}
    y, gs = grads(lambda a, b: F.matmul(a, b), data(2, 3, 4), data(2, 4, 5, seed=1))
    out["matmul"], out["matmul.grads"] = y, gs
    y, gs = grads(lambda x, w: F.conv2d(x, w, stride=1, padding=1), data(2, 3, 6, 6),
                   data(4, 3, 3, 3, seed=1))
    out["conv2d"], out["conv2d.grads"] = y, gs
    y, (g,) = grads(lambda x: F.max_pool2d(x, 2), data(1, 2, 4, 4, seed=3))
    out["max_pool2d"], out["max_pool2d.grad"] = y, g
    y, (g,) = grads(lambda x: F.avg_pool2d(x, 2), data(1, 2, 4, 4, seed=3))
    out["avg_pool2d"], out["avg_pool2d.grad"] = y, g
    return out


@case()
def losses() -> dict:
    import megengine as mge
    import megengine.functional as F

    labels = mge.tensor(np.array([0, 2, 1, 2], dtype="int32"))
    out = {}
    y, (g,) = grads(lambda x: F.nn.cross_entropy(x, labels), data(4, 3))
    out["cross_entropy"], out["cross_entropy.grad"] = y, g
    target = mge.tensor(data(4, 3, seed=5))
    y, (g,) = grads(lambda x: F.nn.square_loss(x, target), data(4, 3))
    out["square_loss"], out["square_loss.grad"] = y, g
    y, (g,) = grads(lambda x: F.nn.l1_loss(x, target), data(4, 3))
    out["l1_loss"], out["l1_loss.grad"] = y, g
    prob = mge.tensor((np.arange(12).reshape(4, 3) % 2).astype("float32"))
    y, (g,) = grads(lambda x: F.nn.binary_cross_entropy(x, prob, with_logits=True), data(4, 3))
    out["bce"], out["bce.grad"] = y, g
    return out


def _train(model: Any, opt_name: str, steps: int, shape: tuple, classes: int) -> dict:
    import megengine as mge
    import megengine.functional as F
    import megengine.optimizer as optim
    from megengine.autodiff import GradManager

    opt = {"sgd": lambda p: optim.SGD(p, lr=0.05, momentum=0.9),
           "adam": lambda p: optim.Adam(p, lr=1e-2),
           "adamw": lambda p: optim.AdamW(p, lr=1e-2, weight_decay=0.1),
           "adagrad": lambda p: optim.Adagrad(p, lr=0.05),
           "adadelta": lambda p: optim.Adadelta(p)}[opt_name](model.parameters())
    gm = GradManager().attach(model.parameters())
    rng = np.random.RandomState(7)
    losses = []
    for _ in range(steps):
        x = mge.tensor(rng.standard_normal(shape).astype("float32"))
        y = mge.tensor(rng.randint(0, classes, shape[0]).astype("int32"))
        with gm:
            loss = F.nn.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(float(loss.numpy()))
    # flattened: per-channel vectors are (C,) here, (1, C, 1, 1) in MegEngine
    state = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v).ravel()
             for k, v in model.state_dict().items()}
    return {"losses": np.array(losses, dtype="float32"), "state": state}


def set_weights(model: Any, seed: int, scale: float = 0.3) -> None:
    """Deterministic weights, the same on both sides (their initializers draw differently):
    parameters in sorted name order, each drawn at its size (layouts may differ, sizes not);
    the buffers stay as built."""
    rng = np.random.RandomState(seed)
    params = dict(model.named_parameters())
    state = {}
    for name, value in sorted(model.state_dict().items()):
        value = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if name in params:
            value = (rng.standard_normal(value.shape) * scale).astype("float32")
        state[name] = value
    model.load_state_dict(state)


@case(rtol=1e-4, atol=1e-5)
def mlp_training_every_optimizer() -> dict:
    import megengine.module as M

    out = {}
    for name in ("sgd", "adam", "adamw", "adagrad", "adadelta"):
        model = M.Sequential(M.Linear(6, 16), M.ReLU(), M.Linear(16, 3))
        set_weights(model, 1)
        out[name] = _train(model, name, 10, (8, 6), 3)
    return out


@case(rtol=1e-4, atol=1e-5)
def cnn_with_batchnorm_training() -> dict:
    import megengine.module as M

    class Flat(M.Module):  # MegEngine has no Flatten module
        def forward(self, x: Any) -> Any:
            return x.reshape(x.shape[0], -1)

    model = M.Sequential(M.Conv2d(2, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(), Flat(),
                         M.Linear(4 * 5 * 5, 3))
    set_weights(model, 2)
    return _train(model, "sgd", 8, (6, 2, 5, 5), 3)


@case()
def state_dict_keys_and_sizes() -> dict:
    """Keys and element counts agree. Layouts differ on purpose: per-channel vectors (conv
    bias, BatchNorm's statistics and affine parameters) are (C,) here as in PyTorch, (1, C, 1, 1)
    in MegEngine; `load_state_dict` takes either."""
    import megengine.module as M

    model = M.Sequential(M.Conv2d(2, 4, 3, groups=2), M.BatchNorm2d(4), M.Linear(4, 3),
                         M.LayerNorm(3), M.Embedding(5, 3))
    return {"keys": sorted(model.state_dict()),
            "sizes": {k: int(np.size(v)) for k, v in model.state_dict().items()}}
