"""Parity cases for the deformable functions of `F.nn`: deformable_conv2d and
deformable_psroi_pooling (values, and the gradients of every input that has one), and the
modules `DeformableConv2d` and `DeformablePSROIPooling`.

MegEngine behaviour measured here and deliberately not copied (so left out of the cases):
- MegEngine refuses a float16 (or any non-float32) input or weight in `deformable_conv2d` and a
  non-float32 input in `deformable_psroi_pooling`; integer RoIs or `trans` kill its process.
  Here all of them are converted to float32 (as MegEngine itself converts offsets and mask).
- MegEngine takes a grouped weight only in its 5-d (groups, O / groups, C / groups, kh, kw)
  form; here the (O, C / groups, kh, kw) form `conv2d` takes works too.
- MegEngine requires the output channels to be divisible by the number of deformable groups
  (nothing in the computation needs it); here only the input channels must be.
- MegEngine accepts offsets and masks with a larger batch than the input's (it reads the first
  N), `deformable_psroi_pooling` with `sample_per_part=0` (every bin 0) or `part_size=0` (dx and
  dy both read from trans[0, 0, 0, 0]), and `part_size` above the pooled size (it reads past
  `trans`); here these raise.
"""

from __future__ import annotations

import numpy as np
from parity_cases import case, data, grads

# (batch index, x0, y0, x1, y1): inside, past the edges, a point, inverted, halves to round
ROIS = np.array([[0, 1.2, 0.6, 5.5, 4.4], [1, -1.0, 2.0, 9.0, 8.0], [1, 3.0, 3.0, 3.0, 3.0],
                 [0, 6.0, 5.0, 2.0, 1.0], [1, 2.5, 1.5, 6.5, 5.5]], "float32")


def _conv_inputs(n, c, h, w, o, k, stride, pad, dil, groups, dg, seed):
    """x, the weight in MegEngine's layout, offsets (some samples past the edges), the mask."""
    oh = (h + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // stride[0] + 1
    ow = (w + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // stride[1] + 1
    weight = data(o, c // groups, *k, seed=seed + 1)
    if groups > 1:
        weight = weight.reshape(groups, o // groups, c // groups, *k)
    mask = np.random.RandomState(seed + 3).uniform(0, 1, (n, dg * k[0] * k[1], oh, ow))
    return (data(n, c, h, w, seed=seed), weight,
            data(n, 2 * dg * k[0] * k[1], oh, ow, seed=seed + 2) * 2, mask.astype("float32"))


# (n, c, h, w, o, kernel, stride, padding, dilation, groups, deformable groups)
CONV_CONFIGS = {
    "plain": (1, 2, 5, 6, 3, (3, 3), (1, 1), (0, 0), (1, 1), 1, 1),
    "strided": (2, 3, 7, 6, 2, (3, 2), (2, 1), (1, 2), (1, 2), 1, 1),
    "grouped": (1, 4, 6, 6, 4, (3, 3), (1, 1), (1, 1), (1, 1), 2, 2),
    "deformable_groups": (2, 4, 5, 5, 6, (2, 2), (2, 2), (1, 0), (2, 1), 1, 2),
}


@case(rtol=1e-5, atol=1e-5)
def deformable_conv2d_values_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    for name, (n, c, h, w, o, k, stride, pad, dil, groups, dg) in CONV_CONFIGS.items():
        inputs = _conv_inputs(n, c, h, w, o, k, stride, pad, dil, groups, dg, seed=len(out))
        bias = data(1, o, 1, 1, seed=9)

        def f(x, weight, offset, mask, bias, stride=stride, pad=pad, dil=dil, groups=groups):
            y = F.deformable_conv2d(x, weight, offset, mask, bias, stride, pad, dil, groups)
            return y * mge.tensor(data(*y.shape, seed=7))

        y, g = grads(f, *inputs, bias)
        out[name] = {"y": y, "x": g[0], "weight": g[1], "offset": g[2], "mask": g[3],
                     "bias": g[4]}
    return out


@case(rtol=1e-5, atol=1e-5)
def deformable_conv2d_zero_offsets_is_conv2d() -> dict:
    """Every sample on a whole pixel: the offsets' gradients are one-sided there (towards the
    next pixel), and zero past the last row and column."""
    import megengine as mge
    import megengine.functional as F

    x, weight = data(1, 3, 5, 5, seed=2), data(2, 3, 3, 3, seed=3)
    offset, mask = np.zeros((1, 18, 5, 5), "float32"), np.ones((1, 9, 5, 5), "float32")

    def f(x, weight, offset, mask):
        y = F.deformable_conv2d(x, weight, offset, mask, padding=1)
        return y * mge.tensor(data(*y.shape, seed=5))

    y, (gx, gw, goff, gmask) = grads(f, x, weight, offset, mask)
    conv = F.conv2d(mge.tensor(x), mge.tensor(weight), padding=1).numpy()
    return {"y": y, "conv2d": conv, "x": gx, "weight": gw, "offset": goff, "mask": gmask}


@case(rtol=1e-5, atol=1e-5)
def deformable_conv2d_module() -> dict:
    import megengine as mge
    import megengine.module as M

    m = M.DeformableConv2d(4, 6, (3, 2), stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    shapes = {k: list(v.shape) for k, v in m.state_dict().items()}
    m.load_state_dict({"weight": data(2, 3, 2, 3, 2, seed=1), "bias": data(1, 6, 1, 1, seed=2)})
    x = data(2, 4, 6, 7, seed=3)
    offset, mask = data(2, 12, 3, 7, seed=4), np.abs(data(2, 6, 3, 7, seed=5))
    y = m(mge.tensor(x), mge.tensor(offset), mge.tensor(mask))
    plain = M.DeformableConv2d(3, 5, 3, bias=False)
    return {"shapes": shapes, "y": y.numpy(), "bias_init": M.DeformableConv2d(2, 3, 1).bias.numpy(),
            "plain": {k: list(v.shape) for k, v in plain.state_dict().items()},
            "kernel": list(m.kernel_size), "stride": list(m.stride), "padding": list(m.padding),
            "dilation": list(m.dilation), "groups": m.groups}


# (no_trans, part_size, pooled_h, pooled_w, sample_per_part, spatial_scale, trans_std)
PSROI_CONFIGS = {
    "3x3": (False, 3, 3, 3, 2, 1.0, 0.1),
    "2x2_scaled": (False, 2, 2, 2, 3, 0.5, 0.4),
    "one_part": (False, 1, 1, 1, 4, 0.8, 1.0),
    "no_trans": (True, 3, 3, 4, 2, 0.7, 0.1),
}


@case(rtol=1e-5, atol=1e-5)
def deformable_psroi_pooling_values_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    rois, x = mge.tensor(ROIS), data(2, 3, 8, 9)
    out = {}
    for name, args in PSROI_CONFIGS.items():
        trans = data(len(ROIS), 2, args[2], args[3], seed=4)
        scale = mge.tensor(data(len(ROIS), 3, args[2], args[3], seed=7))

        def f(t, tr, args=args, scale=scale):
            return F.deformable_psroi_pooling(t, rois, tr, *args) * scale

        if args[0]:  # no_trans: trans has no gradient
            y, (gx,) = grads(lambda t, f=f, tr=trans: f(t, mge.tensor(tr)), x)
            out[name] = {"y": y, "x": gx}
        else:
            y, (gx, gt) = grads(f, x, trans)
            out[name] = {"y": y, "x": gx, "trans": gt}
    return out


@case(rtol=1e-5, atol=1e-5)
def deformable_psroi_pooling_on_whole_pixels() -> dict:
    """With trans 0 every sample lies on a whole pixel: interpolated between its floor and its
    ceil (the same pixel), so trans's gradient is 0 there, on a non-linear image."""
    import megengine as mge
    import megengine.functional as F

    x = (np.arange(64, dtype="float32").reshape(1, 1, 8, 8) / 8) ** 2
    rois = mge.tensor(np.array([[0, 3, 3, 10, 10], [0, 1, 5, 8, 12]], "float32"))
    y, (gx, gt) = grads(lambda t, tr: F.deformable_psroi_pooling(t, rois, tr, False, 2, 2, 2, 2,
                                                                 0.5, 0.25),
                        x, np.zeros((2, 2, 2, 2), "float32"))
    return {"y": y, "x": gx, "trans": gt}


@case(rtol=1e-5, atol=1e-5)
def deformable_psroi_pooling_module() -> dict:
    import megengine as mge
    import megengine.module as M

    m = M.DeformablePSROIPooling(False, 2, 2, 2, 2, 0.9, trans_std=0.3)
    y = m(mge.tensor(data(2, 2, 7, 7, seed=1)), mge.tensor(ROIS),
          mge.tensor(data(len(ROIS), 2, 2, 2, seed=2)))
    return {"y": y.numpy(), "parameters": len(list(m.parameters())),
            "attrs": [m.no_trans, m.part_size, m.pooled_h, m.pooled_w, m.sample_per_part,
                      m.spatial_scale, m.trans_std]}


@case(rtol=1e-5, atol=1e-5)
def deformable_functions_in_the_nn_namespace() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, weight, offset, mask = _conv_inputs(1, 2, 4, 4, 2, (2, 2), (1, 1), (0, 0), (1, 1), 1, 1,
                                           seed=11)
    conv = F.nn.deformable_conv2d(mge.tensor(x), mge.tensor(weight), mge.tensor(offset),
                                  mge.tensor(mask))
    pool = F.nn.deformable_psroi_pooling(mge.tensor(data(2, 2, 6, 6)), mge.tensor(ROIS),
                                         mge.tensor(data(5, 2, 2, 2)), False, 2, 2, 2, 2, 1.0)
    return {"conv": conv.numpy(), "pool": pool.numpy()}


@case(rtol=1e-5, atol=1e-5, megengine_bug="with part_size below pooled_h or pooled_w, "
      "deformable_psroi_pooling reads trans, which it requires to be (K, 2, pooled_h, "
      "pooled_w), as if it were (K, 2, part_size, part_size): RoI 1 takes RoI 0's offsets, and "
      "each RoI's dy comes from its dx plane")
def deformable_psroi_pooling_part_size_below_pooled() -> dict:
    """part_size=1: one offset per RoI, trans[k, :, 0, 0], moving all its bins together.
    The reference: the pooling with no_trans of the image shifted by whole pixels (each RoI's
    offsets are whole pixels), which moves every sample by as much."""
    import megengine as mge
    import megengine.functional as F

    x = data(1, 2, 12, 12)
    rois = np.array([[0, 3, 4, 6, 7], [0, 5, 3, 7, 8]], "float32")
    trans = np.zeros((2, 2, 2, 2), "float32")
    trans[0, :, 0, 0], trans[1, :, 0, 0] = (1, 2), (-2, 1)  # pixels: the RoIs are 4 and 3 wide
    trans[0, :, 0, 0] /= 4 * 0.5  # dx, dy in RoI sizes times trans_std 0.5
    trans[1, :, 0, 0] = trans[1, :, 0, 0] / np.array([3 * 0.5, 6 * 0.5])
    trans[:, :, 1, :] = trans[:, :, :, 1] = 5.0  # read only by the wrong indexing
    got = F.deformable_psroi_pooling(mge.tensor(x), mge.tensor(rois), mge.tensor(trans), False,
                                     1, 2, 2, 2, 1.0, 0.5).numpy()
    want = []
    for k, (dx, dy) in enumerate(((1, 2), (-2, 1))):
        moved = rois[k:k + 1] + np.array([0, dx, dy, dx, dy], "float32")
        want.append(F.deformable_psroi_pooling(mge.tensor(x), mge.tensor(moved),
                                               mge.tensor(trans[:1]), True, 1, 2, 2, 2, 1.0,
                                               0.5).numpy())
    return {"got": got, "want": np.concatenate(want)}


@case()
def deformable_conv2d_offsets_of_the_wrong_size_raise() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, weight = mge.tensor(data(1, 2, 5, 5)), mge.tensor(data(3, 2, 3, 3))
    y = F.deformable_conv2d(x, weight, mge.tensor(np.zeros((1, 18, 2, 3), "float32")),
                            mge.tensor(np.ones((1, 9, 2, 3), "float32")))
    return {"y": y.numpy()}


@case()
def deformable_conv2d_channels_not_matching_raise() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, weight = mge.tensor(data(1, 4, 5, 5)), mge.tensor(data(3, 3, 3, 3))
    y = F.deformable_conv2d(x, weight, mge.tensor(np.zeros((1, 18, 3, 3), "float32")),
                            mge.tensor(np.ones((1, 9, 3, 3), "float32")))
    return {"y": y.numpy()}


@case(megengine_aborts=True)
def deformable_conv2d_zero_stride_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, weight = mge.tensor(data(1, 2, 5, 5)), mge.tensor(data(3, 2, 3, 3))
    y = F.deformable_conv2d(x, weight, mge.tensor(np.zeros((1, 18, 3, 3), "float32")),
                            mge.tensor(np.ones((1, 9, 3, 3), "float32")), stride=0)
    return {"y": y.numpy()}


@case()
def deformable_psroi_pooling_trans_of_the_wrong_shape_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    y = F.deformable_psroi_pooling(mge.tensor(data(2, 2, 6, 6)), mge.tensor(ROIS),
                                   mge.tensor(np.zeros((5, 2, 3, 2), "float32")), False, 2, 2, 2,
                                   2, 1.0)
    return {"y": y.numpy()}
