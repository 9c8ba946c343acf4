"""Parity cases for MegEngine code that failed here before it was run against MegEngine: float
class labels, several argmax axes, mixed-precision batch_norm, a GradManager passed to a traced
step, autocast's and GradScaler's MegEngine arguments and defaults, schedulers."""

from __future__ import annotations

from typing import Any

import numpy as np
from parity_cases import case, data, grads


@case()
def cross_entropy_with_float_labels() -> dict:
    import megengine as mge
    import megengine.functional as F

    labels = mge.tensor(np.array([0.0, 2.0, 1.0, 1.0], dtype="float32"))
    y, (g,) = grads(lambda x: F.nn.cross_entropy(x, labels), data(4, 3))
    return {"loss": y, "grad": g}


@case()
def argmax_over_several_axes_keeps_shape() -> dict:
    """Only the shapes: MegEngine 1.13 reduces the axes one after the other, so the second
    argmax runs over the first's indices (for a (2, 3, 4) input, `axis=(0, 1)` gave
    [1, 0, 0, 0] where the flattened argmax is [0, 5, 1, 4]); this project returns the index
    into the flattened axes, as numpy would (tests/eager/test_ops.py checks the values)."""
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(2, 3, 4, seed=1))
    return {"shape": list(F.argmax(x, axis=(0, 1)).shape),
            "keepdims": list(F.argmax(x, axis=(0, 1), keepdims=True).shape),
            "dtype": str(F.argmin(x, axis=(1, 2)).dtype)}


@case(rtol=2e-3, atol=2e-3)
def batch_norm_half_input_with_float_weights() -> dict:
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(data(2, 3, 4, 4).astype("float16"))
    w = mge.tensor(np.linspace(0.5, 1.5, 3, dtype="float32").reshape(1, 3, 1, 1))
    b = mge.tensor(np.linspace(-0.2, 0.2, 3, dtype="float32").reshape(1, 3, 1, 1))
    rm = mge.tensor(np.zeros((1, 3, 1, 1), "float32"))
    rv = mge.tensor(np.ones((1, 3, 1, 1), "float32"))
    gm = GradManager().attach([x, w, b])
    with gm:
        y = F.nn.batch_norm(x, rm, rv, w, b, training=True)
        gm.backward((y * y).sum())
    return {"y": y.numpy(), "dtype": str(y.dtype), "running_mean": rm.numpy(),
            "running_var": rv.numpy(), "dx": x.grad.numpy(), "dw": w.grad.numpy(),
            "db": b.grad.numpy()}


@case(rtol=1e-5, atol=1e-6)
def batch_norm_not_in_place_returns_new_statistics() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(2, 3, 4, 4))
    rm = mge.tensor(np.zeros((1, 3, 1, 1), "float32"))
    rv = mge.tensor(np.ones((1, 3, 1, 1), "float32"))
    y, mean, var = F.nn.batch_norm(x, rm, rv, training=True, inplace=False)
    return {"y": y.numpy(), "mean": mean.numpy(), "var": var.numpy(),
            "untouched": [rm.numpy(), rv.numpy()]}


@case(rtol=1e-5, atol=1e-6)
def grad_manager_as_a_keyword_of_a_traced_step() -> dict:
    import megengine as mge
    import megengine.module as M
    import megengine.optimizer as optim
    from megengine.autodiff import GradManager
    from megengine.jit import trace

    net = M.Linear(3, 2)
    net.weight[...] = mge.tensor(data(2, 3, seed=4))
    net.bias[...] = mge.tensor(np.zeros(2, "float32"))
    opt = optim.SGD(net.parameters(), lr=0.1)
    manager = GradManager().attach(net.parameters())

    @trace(symbolic=True)
    def step(x: Any, *, gm: Any) -> Any:
        with gm:
            loss = (net(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    x = mge.tensor(data(4, 3, seed=5))
    losses = [float(step(x, gm=manager).numpy()) for _ in range(3)]
    return {"losses": losses, "weight": net.weight.numpy()}


@case()
def autocast_and_grad_scaler_arguments() -> dict:
    import megengine as mge
    import megengine.amp as amp

    scaler = amp.GradScaler()
    ac = amp.autocast(enabled=True, low_prec_dtype="float16", high_prec_dtype="float32")
    x = mge.tensor(np.ones((2, 3), "float32"))
    with ac:
        y = x @ x.T  # MegEngine's autocast casts matmul inputs on the CPU too
    return {"scale": float(scaler.scale_factor), "growth_interval": scaler.growth_interval,
            "dtype": str(y.dtype), "y": y.numpy().astype("float32")}


@case()
def scheduler_subclass_and_state_dict() -> dict:
    import megengine as mge
    import megengine.optimizer as optim

    class Halving(optim.LRScheduler):
        def __init__(self, optimizer: Any, every: int, current_epoch: int = -1):
            self.every = every
            super().__init__(optimizer, current_epoch)

        def get_lr(self) -> list:
            return [b * 0.5 ** (self.current_epoch // self.every) for b in self.base_lrs]

    opt = optim.SGD([mge.Parameter(np.ones(2, "float32"))], lr=0.8)
    sched = Halving(opt, 2)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(4):
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    multi = optim.MultiStepLR(optim.SGD([mge.Parameter(np.ones(2, "float32"))], lr=1.0),
                              [2, 4])
    multi.step()
    multi.step()
    state = multi.state_dict()
    fresh_opt = optim.SGD([mge.Parameter(np.ones(2, "float32"))], lr=1.0)
    fresh = optim.MultiStepLR(fresh_opt, [2, 4])
    fresh.load_state_dict(state)
    fresh.step()
    return {"lrs": lrs, "state": {k: v for k, v in state.items()},
            "resumed_epoch": fresh.current_epoch, "resumed_lr": fresh_opt.param_groups[0]["lr"]}


@case()
def init_fans_gains_and_set_value() -> dict:
    import megengine as mge
    import megengine.module as M

    init = M.init
    fans = [list(init.calculate_fan_in_and_fan_out(mge.tensor(np.zeros(s, "float32"))))
            for s in [(5, 3), (8, 2, 3, 3), (4, 2, 5)]]
    gains = [float(init.calculate_gain(n, p)) for n, p in
             [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None),
              ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2)]]
    p = mge.Parameter(np.zeros(2, "float32"))
    p.grad_backup = 3.0
    p.set_value(mge.tensor(np.ones((2, 3), "float32")))
    # a grouped and a depthwise convolution's weight count one group (MegEngine's 5-d layout)
    module_fans = [list(init.calculate_fan_in_and_fan_out(m.weight)) for m in
                   (M.Conv2d(4, 6, 3, groups=2), M.Conv2d(6, 6, 3, groups=6),
                    M.ConvTranspose2d(4, 6, 3, groups=2))]
    return {"fans": fans, "gains": gains, "correct": float(init.calculate_correct_fan(
        mge.tensor(np.zeros((8, 2, 3, 3), "float32")), "fan_out")), "attr": p.grad_backup,
        "set": p.numpy(), "module_fans": module_fans}


@case()
def set_value_deepcopy_and_train_recursive() -> dict:
    """`set_value` keeps its value's gradient history, `copy.deepcopy` of a tensor cuts it and
    drops user attributes, and `train(mode, recursive)` calls overridden `train`s in
    `modules()` order (the zoo's BigGAN spectral norm and mimicry GANs rely on these)."""
    import copy

    import megengine as mge
    import megengine.module as M
    from megengine.autodiff import GradManager

    w, x = mge.Parameter(np.array([1.0, 2.0], "float32")), mge.tensor([1.0, 1.0])
    b = mge.tensor([0.0, 0.0])
    gm = GradManager().attach([w])
    with gm:
        b.set_value(w * 3)
        y = w * x
        gm.backward((b * x).sum() + (copy.deepcopy(y) * w).sum())
    w.note = "attribute"
    c = copy.deepcopy(w)

    class FrozenBN(M.Module):
        def __init__(self):
            super().__init__()
            self.bn = M.BatchNorm2d(2)

        def forward(self, v):
            return v

        def train(self, mode=True, recursive=True):
            super().train(mode, recursive)
            self.bn.eval()

    frozen, net = FrozenBN(), M.Sequential(FrozenBN(), M.Dropout(0.1))
    for m in (frozen, net):
        m.eval()
        m.train()
    net.train(False, recursive=False)
    return {"grad": w.grad.numpy(), "copy": [type(c).__name__, hasattr(c, "note"), c.numpy()],
            "frozen": [frozen.training, frozen.bn.training],
            "net": [m.training for m in net.modules()]}
