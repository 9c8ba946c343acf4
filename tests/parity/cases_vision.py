"""Parity cases for the image functions and layers (instance_norm, adaptive_max_pool2d,
pixel_shuffle, conv3d, local_response_norm, ctc_loss; InstanceNorm, Pad, PixelShuffle, Conv3d,
the fused ConvBn modules, Conv2d's padding_mode, BatchNorm2d's freeze).

MegEngine behaviour measured here and deliberately not copied (so left out of the cases):
- `adaptive_max_pool2d` with an output larger than the input dies of SIGFPE in MegEngine 1.13
  on the CPU (its bin stride n // o is 0); here it raises (`adaptive_max_pool_larger_output`).
- MegEngine's max-pooling backward gives the full gradient to *every* tied maximum of a window
  (an all-ones 4x4 input pooled to 2x2 gets gradient 1 everywhere, 4 per window); here one
  element per window gets it, as in jax and PyTorch. The inputs below have no ties.
- `local_response_norm` is right in MegEngine 1.13 for 4-d (N, C, H, W) input only: on the CPU
  a 2-d (2, 7) input gives all zeros, a 3-d (2, 6, 5) one kills the process (SIGSEGV) and a
  5-d (2, 5, 2, 2, 2) one gives values up to 1.0 away from x / (k + alpha * s) ** beta, which
  4-d inputs match to 1e-7. Here every (N, C, ...) input follows that formula; the cases use
  4-d inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from parity_cases import case, data, grads, set_weights


def _probs(t: int, n: int, c: int, seed: int) -> np.ndarray:
    logits = np.random.RandomState(seed).standard_normal((t, n, c))
    return (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype("float32")


def _state(model: Any) -> dict:
    """The state dict, flattened: per-channel vectors are (C,) here, (1, C, 1, 1) there."""
    return {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v).ravel()
            for k, v in model.state_dict().items()}


def _module_grads(model: Any, x: np.ndarray) -> dict:
    """Output, input gradient and parameter gradients (None where none reached) of
    sum(model(x) * a fixed random weighting)."""
    import megengine as mge
    from megengine.autodiff import GradManager

    xt = mge.tensor(x)
    params = dict(model.named_parameters())
    gm = GradManager().attach([xt, *params.values()])
    with gm:
        y = model(xt)
        gm.backward((y * mge.tensor(data(*y.shape, seed=9))).sum())
    return {"y": y.numpy(), "x.grad": xt.grad.numpy(),
            "grads": {k: None if p.grad is None else p.grad.numpy().ravel()
                      for k, p in params.items()}}


# ----- functional ---------------------------------------------------------------------------------
@case(rtol=1e-4, atol=1e-5)
def instance_norm_values_and_grads() -> dict:
    import megengine.functional as F

    x = data(2, 3, 4, 5) * 3 + 1
    y, gs = grads(lambda x, w, b: F.nn.instance_norm(x, True, w, b, eps=1e-3) * x, x,
                  data(3, seed=1), data(3, seed=2))
    plain, (g,) = grads(lambda x: F.nn.instance_norm(x, False) ** 2, x)
    return {"affine": y, "affine.grads": gs, "plain": plain, "plain.grad": g}


@case()
def instance_norm_of_3d_input_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.nn.instance_norm(mge.tensor(data(2, 3, 6)), False).numpy()}


@case()
def adaptive_max_pool_bins() -> dict:
    import megengine.functional as F

    out = {}
    for oshp in ((3, 2), (4, 4), (5, 3), (7, 5), 1, (2, 4)):
        y, (g,) = grads(lambda x, o=oshp: F.nn.adaptive_max_pool2d(x, o), data(2, 3, 7, 5))
        out[str(oshp)], out[f"{oshp}.grad"] = y, g
    return out


@case(megengine_aborts=True)
def adaptive_max_pool_larger_output() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.nn.adaptive_max_pool2d(mge.tensor(data(2, 3, 7, 5)), (9, 5)).numpy()}


@case()
def pixel_shuffle_orders() -> dict:
    import megengine.functional as F

    out = {}
    for shape, r in (((2, 8, 3, 4), 2), ((18, 2, 3), 3), ((2, 3, 8, 2, 2), 2)):
        y, (g,) = grads(lambda x, r=r: F.nn.pixel_shuffle(x, r) ** 2, data(*shape))
        out[str(shape)], out[f"{shape}.grad"] = y, g
    return out


@case()
def pixel_shuffle_indivisible_channels_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.nn.pixel_shuffle(mge.tensor(data(1, 6, 2, 2)), 2).numpy()}


@case(rtol=1e-4, atol=1e-4)
def conv3d_values_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    bias = mge.tensor(data(1, 6, 1, 1, 1, seed=3))
    y, gs = grads(lambda x, w: F.nn.conv3d(x, w, bias, stride=(1, 2, 1), padding=(1, 0, 1),
                                           dilation=(2, 1, 1)),
                  data(2, 4, 5, 6, 5), data(6, 4, 3, 3, 3, seed=1))
    out["dense"], out["dense.grads"] = y, gs
    y, gs = grads(lambda x, w: F.nn.conv3d(x, w, groups=2, padding=1),
                  data(2, 4, 4, 3, 5), data(2, 3, 2, 3, 1, 2, seed=2))
    out["grouped"], out["grouped.grads"] = y, gs
    return out


@case(rtol=1e-5, atol=1e-5)
def local_response_norm_values_and_grads() -> dict:
    import megengine.functional as F

    out = {}
    for shape, n in (((2, 7, 3, 4), 3), ((2, 7, 3, 4), 5), ((2, 7, 3, 4), 1), ((1, 4, 2, 2), 9)):
        y, (g,) = grads(lambda x, n=n: F.nn.local_response_norm(x, n, 2.0, 0.1, 0.75),
                        data(*shape) * 3)
        out[f"{shape}/{n}"], out[f"{shape}/{n}.grad"] = y, g
    return out


@case()
def local_response_norm_even_kernel_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.nn.local_response_norm(mge.tensor(data(1, 3, 2, 2)), 4).numpy()}


@case(rtol=1e-4, atol=1e-5)
def ctc_loss_values_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    pred = _probs(6, 3, 4, seed=0)
    lens = mge.tensor(np.array([6, 4, 3], "int32"))
    label = mge.tensor(np.array([[1, 2, 2], [3, 3, 0], [2, 0, 0]], "int32"))
    label_lens = mge.tensor(np.array([3, 2, 1], "int32"))
    out = {}
    for reduction in ("mean", "sum", "none"):
        y, (g,) = grads(lambda p, r=reduction: F.nn.ctc_loss(p, lens, label, label_lens,
                                                            reduction=r), pred)
        out[reduction], out[reduction + ".grad"] = y, g
    flat = mge.tensor(np.array([1, 2, 2, 3, 3, 2], "int32"))
    y, (g,) = grads(lambda p: F.nn.ctc_loss(p, lens, flat, label_lens, reduction="none"), pred)
    out["concatenated"], out["concatenated.grad"] = y, g
    blank3 = mge.tensor(np.array([[1, 2, 0], [0, 0, 1], [2, 1, 1]], "int32"))
    y, (g,) = grads(lambda p: F.nn.ctc_loss(p, lens, blank3, label_lens, blank=3), pred)
    out["blank3"], out["blank3.grad"] = y, g
    return out


@case(rtol=1e-5, atol=1e-4)
def ctc_loss_label_longer_than_frames() -> dict:
    """No alignment fits: MegEngine's log floor (log of the smallest normal float) gives a
    large finite loss, not inf."""
    import megengine as mge
    import megengine.functional as F

    pred = _probs(4, 2, 3, seed=1)
    y, (g,) = grads(lambda p: F.nn.ctc_loss(
        p, mge.tensor(np.array([2, 4], "int32")), mge.tensor(np.array([[1, 2, 1], [2, 2, 0]],
                                                                      "int32")),
        mge.tensor(np.array([3, 2], "int32")), reduction="none"), pred)
    return {"y": y, "grad": g}


@case()
def ctc_loss_pred_length_past_the_frames_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.nn.ctc_loss(mge.tensor(_probs(3, 2, 3, seed=0)),
                               mge.tensor(np.array([3, 4], "int32")),
                               mge.tensor(np.array([[1], [2]], "int32")),
                               mge.tensor(np.array([1, 1], "int32"))).numpy()}


# ----- modules ------------------------------------------------------------------------------------
@case()
def vision_modules_state_dict_keys_and_sizes() -> dict:
    import megengine.module as M

    models = {"instance_norm": M.InstanceNorm(3),
              "instance_norm_plain": M.InstanceNorm(3, affine=False),
              "conv3d": M.Conv3d(4, 6, (1, 2, 3)), "conv3d_nobias": M.Conv3d(2, 4, 3, bias=False),
              "conv_bn": M.ConvBn2d(3, 4, 3), "conv_bn_relu": M.ConvBnRelu2d(2, 4, 3, bias=False),
              "conv_relu": M.ConvRelu2d(3, 4, 3), "pad": M.Pad(((0, 0), (1, 1))),
              "pixel_shuffle": M.PixelShuffle(2), "lrn": M.LocalResponseNorm(),
              "adaptive_max_pool": M.AdaptiveMaxPool2d(2),
              "frozen_bn": M.BatchNorm2d(3, freeze=True)}
    return {name: {k: int(np.size(v)) for k, v in m.state_dict().items()}
            for name, m in models.items()}


@case(rtol=1e-4, atol=1e-5)
def vision_layers_forward_and_grads() -> dict:
    import megengine.module as M

    x = data(2, 8, 5, 4) * 2
    out = {}
    for name, model in {"instance_norm": M.InstanceNorm(8),
                        "pad_reflect": M.Pad(((0, 0), (0, 0), (1, 2), (2, 1)), "reflect"),
                        "pad_constant": M.Pad(((0, 0), (1, 0), (1, 2), (0, 0)),
                                              constant_val=1.5),
                        "pixel_shuffle": M.PixelShuffle(2),
                        "lrn": M.LocalResponseNorm(3, 1.0, 0.01, 0.5),
                        "adaptive_max_pool": M.AdaptiveMaxPool2d((3, 2))}.items():
        set_weights(model, 1, 0.5)
        out[name] = _module_grads(model, x)
    conv3d = M.Conv3d(2, 4, (2, 3, 1), stride=(1, 2, 1), padding=(1, 0, 0))
    set_weights(conv3d, 2, 0.5)
    out["conv3d"] = _module_grads(conv3d, data(2, 2, 3, 5, 4))
    # grouped: MegEngine's weight is (groups, out/groups, in/groups, ...), here (out,
    # in/groups, ...); `set_weights` draws the same values for both (row-major, same size)
    grouped = M.Conv3d(4, 6, (2, 1, 2), padding=1, groups=2)
    set_weights(grouped, 3, 0.5)
    out["conv3d_grouped"] = _module_grads(grouped, data(1, 4, 2, 3, 3))
    return out


@case(rtol=1e-4, atol=1e-5)
def conv2d_padding_modes() -> dict:
    import megengine.module as M

    out = {}
    for mode in ("zeros", "reflect", "replicate"):
        for name, cls in {"conv": M.Conv2d, "conv_relu": M.ConvRelu2d}.items():
            model = cls(3, 4, 3, stride=(1, 2), padding=(2, 1), padding_mode=mode)
            set_weights(model, 3, 0.5)
            out[f"{name}/{mode}"] = _module_grads(model, data(2, 3, 6, 5))
    return out


@case()
def conv2d_unknown_padding_mode_raises() -> dict:
    import megengine as mge
    import megengine.module as M

    return {"y": M.Conv2d(3, 4, 3, padding=1, padding_mode="circular")(
        mge.tensor(data(1, 3, 4, 4))).numpy()}


@case(rtol=1e-4, atol=1e-5)
def conv_bn_training_and_eval() -> dict:
    import megengine as mge
    import megengine.module as M

    out = {}
    for name, cls in {"conv_bn": M.ConvBn2d, "conv_bn_relu": M.ConvBnRelu2d}.items():
        model = cls(3, 4, 3, padding=1, momentum=0.8, padding_mode="replicate")
        set_weights(model, 4, 0.5)
        steps = [_module_grads(model, data(2, 3, 5, 5, seed=s)) for s in (1, 2)]
        model.eval()
        out[name] = {"train": steps, "eval": model(mge.tensor(data(2, 3, 5, 5, seed=3))).numpy(),
                     "state": _state(model)}
    return out


@case(rtol=1e-4, atol=1e-5)
def batchnorm_freeze() -> dict:
    import megengine.module as M

    out = {}
    for training in (True, False):
        bn = M.BatchNorm2d(3, freeze=True)
        state = {"weight": data(3, seed=1), "bias": data(3, seed=2), "running_mean": data(3),
                 "running_var": np.abs(data(3, seed=3)) + 0.5}
        bn.load_state_dict(state)
        bn.train(training)
        out[f"training={training}"] = {**_module_grads(bn, data(2, 3, 4, 4, seed=4)),
                                       "state": _state(bn)}
    return out


@case()
def batchnorm_freeze_without_running_stats_raises() -> dict:
    import megengine.module as M

    bn = M.BatchNorm2d(3, track_running_stats=False, freeze=True)
    return {"state": _state(bn)}
