"""Parity cases for what stopped MegEngine's model zoo here (issue: the zoo trains unchanged):
parameter naming and order (sorted names, a module reachable twice named once), `parameters()`
as an iterator with attribute filters, `topk` with a Tensor, negative or too large `k`, a
Tensor as a shape, upper-case interpolation modes, `compute_mode` of `linear` and `matmul`,
and the names scripts reach for (`get_logger`, `is_cuda_available`, `set_prealloc_config`,
`core._config`)."""

from __future__ import annotations

import numpy as np
from parity_cases import case, data


def _fpn_like():
    import megengine.module as M

    class Neck(M.Module):
        """The zoo's FPN keeps each conv under its own name and in a list."""

        def __init__(self):
            super().__init__()
            self.fpn_lateral3 = M.Conv2d(2, 2, 1)
            self.fpn_output3 = M.Conv2d(2, 2, 3, padding=1)
            self.lateral_convs = [self.fpn_lateral3]
            self.output_convs = [self.fpn_output3]
            self.body = M.Sequential(*[M.Linear(2, 2, bias=i % 2 == 0) for i in range(11)])
            self.bn = M.BatchNorm2d(2)
            self.alias = self.bn

        def forward(self, x):
            return x

    return Neck()


@case()
def parameter_and_state_dict_order_as_megengine() -> dict:
    net = _fpn_like()
    return {"params": [n for n, _ in net.named_parameters()],
            "buffers": [n for n, _ in net.named_buffers()],
            "state": list(net.state_dict()),
            "modules": [n for n, _ in net.named_modules()],
            "children": [n for n, _ in net.named_children()],
            "count": len(list(net.parameters())),
            "recursive_false": [n for n, _ in net.body.named_parameters(recursive=False)],
            "prefixed": [n for n, _ in net.bn.named_parameters(prefix="bn")]}


@case()
def next_of_parameters_is_the_first_in_order() -> dict:
    import megengine.module as M

    net = M.Sequential(M.Linear(2, 3), M.Linear(3, 1))
    first = next(net.parameters())
    return {"shape": list(first.shape), "is_first": first is net[0].bias,
            "with_requires_grad": len(list(net.parameters(requires_grad=True)))}


@case()
def state_dict_of_megengine_loads_by_name_and_order() -> dict:
    src, dst = _fpn_like(), _fpn_like()
    src.load_state_dict({n: np.full(t.shape, float(i), "float32")
                         for i, (n, t) in enumerate(src.state_dict().items())})
    dst.load_state_dict(src.state_dict())
    return {n: p.numpy() for n, p in dst.named_parameters()}


@case()
def per_channel_tensors_in_megengine_shapes() -> dict:
    """MegEngine's own test_frozen_bn writes BatchNorm statistics as (1, C, 1, 1) tensors;
    conv biases are (1, C, 1, 1) too, and BatchNorm's state dict holds (C,)."""
    import megengine as mge
    import megengine.functional as F
    import megengine.module as M

    bn = M.BatchNorm2d(3, freeze=True)
    bn.running_mean[...] = 0.5 * F.ones((1, 3, 1, 1))
    bn.running_var[...] = 2.0 * F.ones((1, 3, 1, 1))
    bn.weight[...] = F.full((1, 3, 1, 1), 1.5)
    y = bn(mge.tensor(data(2, 3, 2, 2)))
    conv = M.Conv2d(2, 3, 1)
    conv1d, conv3d = M.Conv1d(2, 3, 1), M.Conv3d(2, 3, 1)
    return {"y": y.numpy(),
            "shapes": {"bn": {k: list(v.shape) for k, v in bn.state_dict().items()},
                       "bn_tensors": [list(t.shape) for t in (bn.weight, bn.running_mean)],
                       "bn1d": [list(M.BatchNorm1d(3).running_var.shape)],
                       "conv_bias": [list(conv.bias.shape), list(conv1d.bias.shape),
                                     list(conv3d.bias.shape)],
                       "conv_state": {k: list(v.shape) for k, v in conv.state_dict().items()}}}


@case(rtol=1e-5, atol=1e-5)
def grouped_weights_and_prelu_in_megengine_shapes() -> dict:
    """Grouped and depthwise convolutions (ShuffleNet's) keep a leading groups axis, PReLU a
    (1, C, 1, 1) weight; a MegEngine optimizer checkpoint of them loads by position and the
    next step is the same."""
    import megengine as mge
    import megengine.module as M
    import megengine.optimizer as optim
    from megengine.autodiff import GradManager

    def net():
        return M.Sequential(M.Conv2d(4, 6, 3, groups=2), M.PReLU(6), M.Conv2d(6, 6, 1, groups=6),
                            M.ConvTranspose2d(6, 4, 2, groups=2), M.PReLU())

    def step(model, opt, x):
        gm = GradManager().attach(model.parameters())
        with gm:
            loss = (model(x) ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    x = mge.tensor(data(2, 4, 6, 6))
    a = net()
    a.load_state_dict({n: 0.3 * data(*t.shape, seed=i)
                       for i, (n, t) in enumerate(a.state_dict().items())})
    opt_a = optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    step(a, opt_a, x)
    b = net()
    b.load_state_dict(a.state_dict())
    opt_b = optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    opt_b.load_state_dict(opt_a.state_dict())
    losses = [float(step(m, o, x).numpy()) for m, o in ((a, opt_a), (b, opt_b))]
    # MegEngine 1.13 makes a grouped Conv1d's weight 4-d, then its forward refuses it (the
    # weight of conv1d should be 3-d); here it runs, so only the shape is compared
    return {"shapes": {n: list(p.shape) for n, p in a.named_parameters()},
            "conv1d_shape": list(M.Conv1d(4, 6, 3, groups=2).weight.shape),
            "losses": losses, "params": {n: p.numpy() for n, p in b.named_parameters()}}


@case(rtol=0.05, atol=0)
def default_initialization_as_megengine() -> dict:
    """Linear and convolution weights start at N(0, 1 / fan_in) with MegEngine's fan_in
    (every input channel, whatever the groups; a transposed one's output channels) and
    biases at zero: a model trained from scratch starts from the same distribution. The
    spread of draws of at least 9216 numbers is compared (5%, over 4 standard errors)."""
    import megengine.module as M

    layers = {"linear": M.Linear(400, 300), "conv": M.Conv2d(64, 128, 3),
              "grouped": M.Conv2d(64, 128, 3, groups=4),
              "depthwise": M.Conv2d(1024, 1024, 3, groups=1024),
              "transposed": M.ConvTranspose2d(128, 64, 3), "conv3d": M.Conv3d(16, 32, 3)}
    out = {}
    for name, m in layers.items():
        w = m.weight.numpy().astype("float64")
        out[name] = {"std": float(w.std()),
                     "mean_near_0": bool(abs(w.mean()) < 5 * w.std() / np.sqrt(w.size)),
                     "bias": float(abs(m.bias.numpy()).max())}
    return out


@case()
def topk_with_megengine_k() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(np.array([[2.0, 4.0, 1.0, 3.0], [5.0, 0.0, 7.0, 1.0]], "float32"))
    out = {}
    for name, k in (("above", 6), ("negative", -1), ("negative2", -2), ("tensor", mge.tensor(2)),
                    ("tensor_negative", mge.tensor(-1)), ("tensor_above", mge.tensor(9))):
        for descending in (True, False):
            v, i = F.topk(x, k, descending=descending)
            kv, ki = F.topk(x, k, descending=descending, kth_only=True)
            out[f"{name}_{descending}"] = {"values": v.numpy(), "indices": i.numpy(),
                                           "kth": kv.numpy(), "kth_index": ki.numpy()}
    return out


@case()
def zoo_label_sampler_topk_with_tensor_k() -> dict:
    """The detection zoo's `sample_labels`: k = num_samples - mask.sum(), a negative Tensor."""
    import megengine as mge
    import megengine.functional as F

    labels = mge.tensor(np.array([1, 1, 0, 1, 1, 1, -1, 1], "int32"))
    mask = labels == 1
    scores = mge.tensor(np.linspace(0.1, 0.8, 8).astype("float32")) * mask.astype("float32")
    _, drop = F.topk(scores, k=2 - mask.sum())
    return {"drop": np.sort(drop.numpy())}


@case()
def reshape_to_a_shape_tensor() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(2, 6))
    shape = mge.tensor(np.array([3, 4], "int32"))
    return {"method": x.reshape(shape).numpy(), "function": F.reshape(x, shape).numpy(),
            "minus_one": x.reshape(mge.tensor(np.array([-1, 2], "int32"))).numpy()}


@case()
def interpolate_upper_case_mode() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(1, 2, 3, 3))
    return {"bilinear": F.nn.interpolate(x, scale_factor=2, mode="BILINEAR").numpy(),
            "nearest": F.vision.interpolate(x, size=(5, 4), mode="Nearest").numpy()}


@case()
def linear_and_matmul_compute_mode() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, w = mge.tensor(data(3, 4)), mge.tensor(data(2, 4, seed=1))
    # "float32" (for float16 inputs) fails in MegEngine 1.13 on the CPU with an AsyncError
    return {"linear": F.linear(x, w, None, "default").numpy(),
            "matmul": F.matmul(x, w, transpose_b=True, compute_mode="default").numpy()}


@case()
def names_scripts_reach_for() -> dict:
    import megengine as mge
    from megengine.core import _config

    logger = mge.get_logger("zoo")
    logger.setLevel("INFO")
    mge.device.set_prealloc_config(1024, 1024, 256 * 1024 * 1024, 4.0)
    return {"logger": hasattr(logger, "info"), "cuda": mge.is_cuda_available(),
            "config": hasattr(_config, "_compute_mode")}


@case(rtol=1e-4, atol=1e-5)
def conv_transpose3d_module_and_gradients() -> dict:
    """BigGAN's spectral norm (the multimodal zoo) imports `M.ConvTranspose3d`."""
    import megengine as mge
    import megengine.module as M
    from megengine.autodiff import GradManager

    m = M.ConvTranspose3d(3, 2, (2, 3, 1), stride=(2, 1, 2), padding=(0, 1, 0))
    m.load_state_dict({"weight": data(3, 2, 2, 3, 1, seed=2), "bias": data(1, 2, 1, 1, 1, seed=3)})
    x = mge.tensor(data(2, 3, 3, 4, 5))
    gm = GradManager().attach([x, m.weight, m.bias])
    with gm:
        y = m(x)
        gm.backward((y * y).sum())
    return {"y": y.numpy(), "dx": x.grad.numpy(), "dw": m.weight.grad.numpy(),
            "db": m.bias.grad.numpy(), "shapes": [list(m.weight.shape), list(m.bias.shape)]}


@case()
def forward_hooks_as_the_zoo_uses_them() -> dict:
    """The multimodal zoo's spectral norm: a pre-hook that sets a weight before each call."""
    import megengine as mge
    import megengine.module as M

    lin = M.Linear(2, 3)
    lin.load_state_dict({"weight": data(3, 2), "bias": data(3, seed=1)})
    calls = []

    def scale_input(module, inputs):
        calls.append("pre")
        return (inputs[0] * 2,)

    def add_one(module, inputs, output):
        calls.append("post")
        return output + 1

    h1 = lin.register_forward_pre_hook(scale_input)
    h2 = lin.register_forward_hook(add_one)
    x = mge.tensor(data(4, 2, seed=2))
    hooked = lin(x).numpy()
    h1.remove()
    h2.remove()
    return {"hooked": hooked, "plain": lin(x).numpy(), "calls": calls,
            "pre_left": len(lin._forward_pre_hooks), "post_left": len(lin._forward_hooks)}


@case(rtol=1e-5, atol=1e-5)
def sliding_window_and_its_transpose() -> dict:
    """DALL-E's sparse attention (the multimodal zoo) calls `F.sliding_window`."""
    import megengine as mge
    import megengine.functional as F
    from megengine.autodiff import GradManager

    x = mge.tensor(data(2, 3, 5, 6))
    gm = GradManager().attach([x])
    with gm:
        w = F.sliding_window(x, (2, 3), padding=1, stride=(2, 1), dilation=(1, 2))
        gm.backward((w * w).sum())
    back = F.sliding_window_transpose(w, (5, 6), (2, 3), padding=1, stride=(2, 1),
                                      dilation=(1, 2))
    return {"windows": w.numpy(), "grad": x.grad.numpy(), "back": back.numpy()}
