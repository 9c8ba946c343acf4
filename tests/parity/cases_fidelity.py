"""Parity cases for the last MegEngine differences found by running its own tests and the
op-by-op comparison here: GradManager groups, regions returning data-dependent sizes, dtypes
and layouts where MegEngine's convention differs from PyTorch's, optimizer state dicts, amp
and two of `megengine.data`'s."""

from __future__ import annotations

import numpy as np
from parity_cases import case, data, finite_difference


def _x() -> np.ndarray:
    return np.linspace(-1.0, 2.0, 9, dtype="float32").reshape(3, 3)


@case()
def grad_manager_group_records_as_one() -> dict:
    """MegEngine's group-visibility test: neither manager of `gm | gm2` records the other's
    backward, so `gm.backward(x.grad)` finds nothing to differentiate."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(_x())
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm | gm2:
        y = F.cos(x)
        gm2.backward(y, F.ones_like(y))
        first = x.grad.numpy()
        gm.backward(x.grad, F.ones_like(x.grad))
    return {"first": first, "after": x.grad.numpy()}


@case()
def grad_manager_order_decides_who_records_whom() -> dict:
    """Entered first, a manager records the later one's backward; a group inside it too."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(_x())
    gm, gm2 = GradManager().attach(x), GradManager().attach(x)
    with gm2:
        with gm:
            y = F.cos(x)
            gm.backward(y, F.ones_like(y))
        gm2.backward(x.grad, F.ones_like(x.grad))
    nested = x.grad.numpy()
    z = mge.tensor(_x())
    outer, a, b = (GradManager().attach(z) for _ in range(3))
    with outer:
        with a | b:
            y = F.cos(z)
            b.backward(y, F.ones_like(y))
            a.backward(z.grad, F.ones_like(z.grad))
        outer.backward(z.grad, F.ones_like(z.grad))
    return {"nested": nested, "group_inside": z.grad.numpy()}


@case()
def megengine_conventions_for_dtypes() -> dict:
    """Where MegEngine's convention differs from PyTorch's, MegEngine's: one_hot is int32,
    every power of integers float32."""
    import megengine as mge
    import megengine.functional as F

    i = mge.tensor(np.array([2, 3], dtype="int32"))
    powers = {"int_int": i ** i, "int_literal": i ** 2, "literal_int": 2 ** i,
              "negative": i ** -1, "functional": F.pow(i, 3)}
    out = {name: t.numpy() for name, t in powers.items()}
    out["one_hot"] = F.one_hot(mge.tensor(np.array([0, 2, 1], dtype="int32")), 3).numpy()
    return out


@case()
def layer_norm_keeps_its_shape_and_zero_grad_zeros() -> dict:
    """LayerNorm over (3, 4) keeps (3, 4) weights (MegEngine 1.13 does not flatten them);
    `Module.zero_grad` zeros the gradients that exist and leaves None where there is none."""
    import warnings

    import megengine as mge
    import megengine.module as M
    from megengine.autodiff import GradManager

    ln = M.LayerNorm((3, 4))
    shapes = {name: list(p.shape) for name, p in ln.named_parameters()}
    lin = M.Linear(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        lin.zero_grad()
        before = [p.grad is None for p in lin.parameters()]
        gm = GradManager().attach(lin.parameters())
        with gm:
            gm.backward(lin(mge.tensor(np.ones((1, 2), "float32"))).sum())
        lin.zero_grad()
    return {"shapes": shapes, "none_before": before,
            "after": [p.grad.numpy() for p in lin.parameters()]}


@case()
def tensor_reset_replaces_value_shape_and_dtype() -> dict:
    import megengine as mge

    a = mge.tensor([1.0, 2.0])
    a._reset([7, 8])
    first = (a.numpy(), str(a.dtype))
    a._reset(mge.tensor(np.array([1, 2, 3], dtype="int32")))
    return {"first": first[0], "first_dtype": first[1], "second": a.numpy()}


@case()
def stream_dataset_refuses_index_and_length() -> dict:
    from megengine.data.dataset import StreamDataset

    class Stream(StreamDataset):
        def __init__(self):
            pass

        def __iter__(self):
            yield from range(3)

    out = {}
    for what, call in (("index", lambda s: s[0]), ("length", len)):
        try:
            call(Stream())
            out[what] = "no error"
        except AssertionError:
            out[what] = "AssertionError"
    return out


def _optimizers() -> dict:
    import megengine.optimizer as optim

    return {"sgd": lambda p: optim.SGD(p, lr=0.1),
            "sgd_momentum": lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: optim.Adam(p, lr=0.1), "adamw": lambda p: optim.AdamW(p, lr=0.1),
            "adagrad": lambda p: optim.Adagrad(p, lr=0.1),
            "adadelta": lambda p: optim.Adadelta(p)}


def _trained(make, steps: int = 2, state: dict | None = None):
    import megengine as mge
    import megengine.module as M
    from megengine.autodiff import GradManager

    net = M.Linear(3, 2)
    net.weight._reset(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3))
    net.bias._reset(np.array([0.1, -0.2], "float32"))
    opt = make(net.parameters())
    if state is not None:
        opt.load_state_dict(state)
    gm = GradManager().attach(net.parameters())
    for i in range(steps):
        with gm:
            x = mge.tensor(np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3) * (i + 1))
            gm.backward((net(x) ** 2).sum())
        opt.step()
        opt.clear_grad()
    return net, opt


@case()
def optimizer_state_dict_structure() -> dict:
    """Group keys in order, per-parameter slots in order with their dtypes and shapes; plain
    SGD keeps no slot (MegEngine writes `{}` for its state and then cannot load that file,
    KeyError 0; this project writes an empty entry per parameter, which both load: compared
    by slots here)."""
    out = {}
    for name, make in _optimizers().items():
        _, opt = _trained(make)
        sd = opt.state_dict()
        out[name] = {
            "groups": [[k, str(v)] for g in sd["param_groups"] for k, v in g.items()],
            "slots": sorted({(k, str(v.dtype), str(v.shape)) for s in sd["state"].values()
                             for k, v in s.items()}),
            "order": [list(s) for s in sd["state"].values() if s][:1],
            "values": {f"{i}.{k}": v for i, s in sd["state"].items() for k, v in s.items()}}
    return out


@case()
def optimizer_state_dicts_load_both_ways() -> dict:
    """A state dict in MegEngine's layout (as MegEngine writes it) and one as this project
    writes it (an empty entry per parameter of plain SGD) load on both sides, and training
    goes on from them identically."""
    made = {name: _trained(make)[1].state_dict() for name, make in _optimizers().items()}
    made["sgd_with_entries"] = {"param_groups": made["sgd"]["param_groups"],
                                "state": {0: {}, 1: {}}}
    out = {}
    for name, state in made.items():
        if name == "sgd":  # MegEngine's own plain-SGD file: it raises KeyError loading it
            continue
        make = _optimizers()["sgd" if name == "sgd_with_entries" else name]
        net, opt = _trained(make, steps=1, state=state)
        out[name] = {"weight": net.weight.numpy(), "bias": net.bias.numpy(),
                     "state": {f"{i}.{k}": v for i, s in opt.state_dict()["state"].items()
                               for k, v in s.items()}}
    return out


@case(rtol=1e-3, atol=1e-3)
def autocast_float16_products_on_random_values() -> dict:
    """Under `amp.autocast` with MegEngine's arguments: matrix products and convolutions in
    float16 with float32 accumulation on both sides, the same dtypes and values, except where
    a sum of two float16 numbers is an exact tie between two of them (a convolution's bias):
    MegEngine's CPU rounds those away from zero, IEEE to even (`float16_ties_round_to_even`
    in cases_megengine_bugs.py), one float16 ulp apart."""
    import megengine as mge
    import megengine.amp as amp
    import megengine.functional as F

    a, b = mge.tensor(data(8, 64, seed=1)), mge.tensor(data(64, 16, seed=2))
    x, w = mge.tensor(data(2, 4, 8, 8, seed=3)), mge.tensor(data(6, 4, 3, 3, seed=4) * 0.3)
    with amp.autocast(enabled=True, low_prec_dtype="float16", high_prec_dtype="float32"):
        out = {"matmul": F.matmul(a, b), "matmul_t": F.matmul(a, a, transpose_b=True),
               "linear": F.linear(a, b.transpose(1, 0)), "conv": F.conv2d(x, w, padding=1),
               "conv_bias": F.conv2d(x, w, mge.tensor(data(1, 6, 1, 1, seed=5)), padding=1),
               "batched": F.matmul(mge.tensor(data(3, 8, 64, seed=6)),
                                   mge.tensor(data(3, 64, 8, seed=7)))}
    return {k: {"value": v.numpy().astype("float64"), "dtype": str(v.dtype)}
            for k, v in out.items()}


def _one_layer_rnn() -> tuple:
    """A one-layer RNN with MegEngine's parameters set by name, including the flat buffer its
    forward reads, and an input."""
    import megengine as mge
    import megengine.module as M

    net = M.RNN(4, 5)
    net.load_state_dict({n: np.cos(np.arange(p.size, dtype="float32") * 0.21)
                         .reshape(p.shape) * 0.3 for n, p in net.named_parameters()})
    return net, mge.tensor(data(3, 2, 4, seed=8))


@case(rtol=1e-5, atol=1e-5, isolated=True)
def recurrent_layers_keep_one_flat_parameter() -> dict:
    """RNN and LSTM as MegEngine lays them out: `_flatten_weights`, which the forward reads,
    and the cells' parameters beside it, in `parameters()`, state dicts and optimizer states;
    outputs from a flat buffer set by name; which parameters a one-layer RNN's backward gives a
    gradient and an SGD step with momentum on the flat one. The step's gradient is set by hand:
    the value of MegEngine's recurrent backward is a coin (`recurrent_flat_gradient`). With two
    bidirectional layers MegEngine's RNN gradient is garbage (1e15) and the LSTM's corrupts its
    heap (its fused LSTM backward is wrong even for one layer: `lstm_input_gradient` in
    cases_megengine_bugs.py), so those run forward only, after the backward, in a process of
    their own (`isolated`)."""
    import megengine as mge
    import megengine.module as M
    import megengine.optimizer as optim
    from megengine.autodiff import GradManager

    out = {}
    single, x = _one_layer_rnn()  # first: a bidirectional forward before it spoils its backward
    opt = optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
    gm = GradManager().attach(single.parameters())
    with gm:
        gm.backward((single(x)[0] ** 2).sum())
    out["with_grad"] = [p.grad is not None for p in single.parameters()]
    single._flatten_weights.grad = mge.tensor(data(5, 11, seed=9))
    opt.step()
    out["momentum_slots"] = len(opt.state_dict()["state"])
    out["flat_after"] = single._flatten_weights.numpy()
    for kind in ("RNN", "LSTM"):
        net = getattr(M, kind)(4, 5, num_layers=2, bidirectional=True)
        net.load_state_dict({n: np.sin(np.arange(p.size, dtype="float32") * 0.37 + i)
                             .reshape(p.shape) * 0.3
                             for i, (n, p) in enumerate(net.named_parameters())})
        out[kind] = {"names": [n for n, _ in net.named_parameters()],
                     "shapes": [list(p.shape) for p in net.parameters()],
                     "y": net(x)[0].numpy()}
    return out


@case(rtol=1e-2, atol=2e-3, isolated=True,
      megengine_unreliable="its one-layer RNN backward reads memory it never wrote: the flat "
      "gradient is right, all zeros, 1e23-1e35 or NaN, 4 of 12 first calls in fresh processes")
def recurrent_flat_gradient() -> dict:
    """A one-layer RNN's gradient lands in the flat buffer, laid out as MegEngine's forward
    reads it: autodiff against central differences of each side's own forward at every entry
    of `_flatten_weights` (float32 steps of 1e-2: the tolerance)."""
    from megengine.autodiff import GradManager

    net, x = _one_layer_rnn()
    flat = net._flatten_weights.numpy()

    def loss(weights: np.ndarray) -> float:
        net.load_state_dict({"_flatten_weights": weights}, strict=False)
        return float((net(x)[0] ** 2).sum().numpy())

    want = finite_difference(loss, flat, list(range(flat.size))).reshape(flat.shape)
    net.load_state_dict({"_flatten_weights": flat}, strict=False)
    gm = GradManager().attach(net.parameters())
    with gm:
        gm.backward((net(x)[0] ** 2).sum())
    return {"got": net._flatten_weights.grad.numpy(), "want": want}


@case()
def trace_returns_a_selection_of_data_dependent_size() -> dict:
    """MegEngine's `test_tracing.py`: `trace` returns `x[x > 0]`, of the right size on every
    call (a region returns its padded storage and length here, decision 15)."""
    import megengine as mge
    from megengine.jit import trace

    out = {}
    for symbolic in (False, True):
        @trace(symbolic=symbolic)
        def f(x):
            return x[x > 0] * 2

        for i, v in enumerate(([1.0, -2.0, 3.0], [-1.0, -2.0, -3.0], [4.0, 5.0, -6.0])):
            out[f"{symbolic}_{i}"] = f(mge.tensor(np.array(v, "float32"))).numpy()
    return out
