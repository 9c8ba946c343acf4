"""Parity cases for the geometric and pixel functions of `F.vision` (also flat `F.` / `F.nn.`):
remap, warp_perspective, warp_affine, cvt_color and correlation, values and input gradients.

MegEngine behaviour measured here and deliberately not copied (so left out of the cases, or
kept as `megengine_bug` evidence):
- `correlation`'s gradient for data1 swaps the displacement's x and y (its data2 gradient is
  right): `correlation_data1_gradient`.
- `cvt_color`'s float "RGB2YUV" reads its input as BGR (its Y is BGR2GRAY's, not RGB2GRAY's)
  and "YUV2RGB" writes BGR: `cvt_color_yuv_is_bgr`. Here RGB is RGB.
- MegEngine has no gradient for warp_affine (its backward raises), none for warp_perspective
  in NHWC, and passes none through cvt_color; here all are differentiable.
- "isolated" and "transparent" borders: MegEngine's CPU kernels refuse them or return pixels
  they never wrote; here they raise. Float RGB2BGR, BGR2RGB and the RGBA modes raise in
  MegEngine (uint8 only); here they convert floats. `out_shape` as one int raises a TypeError
  in MegEngine; here it means (n, n). An even `kernel_size` of correlation acts as the odd
  one below it in MegEngine; here it raises.
- The fixed-point sampler (NHWC, 1 to 3 channels) rounds positions computed in double there,
  in a float32 pair here (`eager/core/ops/warp.py`, Note [double positions]): they agree but for
  exact halves reached through a denominator that is not a power of two, where double's own
  rounding decides (20 of 4.8 million positions in a sweep of decimal matrices).
"""

from __future__ import annotations

import numpy as np
from parity_cases import case, data, finite_difference, grads

BORDERS = ("replicate", "constant", "reflect", "reflect_101", "wrap")
# decimal matrices, as users write them: many positions fall on the 1/32-pixel steps' edges
PERSPECTIVE = np.array([[[0.9, 0.2, -1.3], [-0.1, 1.1, 0.7], [0.01, -0.02, 1.0]],
                        [[1.2, -0.3, 2.0], [0.25, 0.8, -3.0], [0.0, 0.03, 0.9]]], "float32")
SCALING = np.array([[[1.3, 0, 0.4], [0, 0.7, -0.6], [0, 0, 1]],
                    [[0.5, 0, 2], [0, 1.5, 0], [0, 0, 1.0]]], "float32")  # MegEngine's resize path


def _map_xy() -> np.ndarray:
    xy = np.random.RandomState(3).uniform(-3, 10, (2, 5, 6, 2)).astype("float32")
    xy[0, 0, :3] = [[2.5, 3.5], [1.0, 2.0], [0.5, -0.5]]  # halves, integers
    return xy


def _weighted(y: object) -> object:
    import megengine as mge

    return y * mge.tensor(data(*y.shape, seed=11))


@case(rtol=1e-5, atol=1e-5)
def remap_values_and_grads() -> dict:
    import megengine.functional as F

    out = {}
    for border in BORDERS:
        for interp in ("linear", "nearest"):
            key = f"{border}/{interp}"
            out[key], out[key + ".grads"] = grads(
                lambda x, xy, b=border, i=interp: _weighted(F.vision.remap(x, xy, b, 1.5, i)),
                data(2, 3, 7, 8), _map_xy())
    return out


@case(rtol=1e-4, atol=1e-4)
def warp_perspective_values_and_grads() -> dict:
    import megengine.functional as F

    out = {}
    for name, mat in (("general", PERSPECTIVE), ("scaling", SCALING)):
        for border in BORDERS:
            key = f"{name}/{border}"
            out[key], out[key + ".grads"] = grads(
                lambda x, m, b=border: _weighted(F.warp_perspective(x, m, (6, 9), border_mode=b,
                                                                    border_val=1.5)),
                data(2, 3, 7, 8), mat)
    mats = np.concatenate([PERSPECTIVE, SCALING[:1]])
    out["mat_idx"], out["mat_idx.grads"] = grads(
        lambda x, m: _weighted(F.warp_perspective(x, m, (5, 4), mat_idx=[1, 0, 1])),
        data(2, 3, 7, 8), mats)
    return out


@case(rtol=1e-5, atol=1e-5)
def warp_perspective_nhwc() -> dict:
    """1 to 3 channels: the fixed-point sampler, every interpolation; 4: the exact one."""
    import megengine as mge
    import megengine.functional as F

    out, mat = {}, mge.tensor(PERSPECTIVE)
    for channels in (1, 2, 3, 4):
        x = mge.tensor(data(2, 7, 8, channels, seed=channels))
        for border in BORDERS:
            for interp in ("linear", "nearest", "cubic", "lanczos4")[:4 if channels < 4 else 1]:
                out[f"{channels}/{border}/{interp}"] = F.vision.warp_perspective(
                    x, mat, (6, 9), border_mode=border, border_val=1.5, format="NHWC",
                    interp_mode=interp).numpy()
    return out


@case(rtol=1e-5, atol=1e-5)
def warp_affine_values() -> dict:
    import megengine as mge
    import megengine.functional as F

    out, mat = {}, mge.tensor(PERSPECTIVE[:, :2])
    for channels in (1, 3, 4):
        x = mge.tensor(data(2, 7, 8, channels, seed=channels))
        for border in BORDERS:
            for interp in ("linear", "nearest", "cubic", "lanczos4")[:4 if channels < 4 else 1]:
                out[f"NHWC/{channels}/{border}/{interp}"] = F.warp_affine(
                    x, mat, (6, 9), border, 1.5, interp_mode=interp).numpy()
    x = mge.tensor(data(2, 3, 7, 8))
    for border in BORDERS:
        out[f"NCHW/{border}"] = F.vision.warp_affine(x, mat, (6, 9), border, 1.5,
                                                     format="NCHW").numpy()
    return out


@case()
def warp_perspective_float16_computes_in_float32() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(1, 2, 5, 5).astype("float16"))
    return {"y": F.warp_perspective(x, mge.tensor(SCALING[:1]), (4, 4)).numpy()}


@case(rtol=1e-5, atol=1e-5)
def correlation_values_and_data2_grad() -> dict:
    import megengine as mge
    import megengine.functional as F

    a = mge.tensor(data(2, 3, 9, 8, seed=1))
    out = {}
    for k, md, s1, s2, pad in ((1, 1, 1, 1, 0), (3, 2, 1, 1, 2), (1, 4, 2, 2, 4),
                               (3, 3, 2, 1, 3), (5, 2, 1, 2, 4)):
        for multiply in (True, False):
            key = f"{k}/{md}/{s1}/{s2}/{pad}/{multiply}"
            out[key], out[key + ".grad"] = grads(
                lambda b, k=k, md=md, s1=s1, s2=s2, pad=pad, m=multiply: _weighted(
                    F.nn.correlation(a, b, k, md, s1, s2, pad, m)), data(2, 3, 9, 8, seed=2))
    return out


@case(rtol=1e-3, atol=2e-3, megengine_bug="correlation's gradient for data1 swaps the "
      "displacement's x and y (a product's finite differences here; data2's is right)")
def correlation_data1_gradient() -> dict:
    import megengine as mge
    import megengine.functional as F

    a, b = data(1, 2, 6, 7, seed=1), data(1, 2, 6, 7, seed=2)
    points = list(range(0, a.size, 5))
    got, want = {}, {}
    for k, md, pad in ((3, 1, 1), (1, 2, 2)):
        def loss(t, k=k, md=md, pad=pad):
            y = F.vision.correlation(t, mge.tensor(b), k, md, 1, 1, pad)
            return (y * mge.tensor(data(*y.shape, seed=11))).sum()

        key = f"{k}/{md}/{pad}"
        want[key] = finite_difference(lambda v, f=loss: float(f(mge.tensor(v)).numpy()), a,
                                      points)
        _, (g,) = grads(lambda t, f=loss: f(t), a)
        got[key] = g.ravel()[points]
    return {"got": got, "want": want}


@case()
def cvt_color_gray() -> dict:
    import megengine as mge
    import megengine.functional as F

    rgb = mge.tensor(np.random.RandomState(4).uniform(0, 255, (2, 5, 6, 3)).astype("float32"))
    return {"RGB2GRAY": F.vision.cvt_color(rgb, "RGB2GRAY").numpy(),
            "bgr2gray": F.vision.cvt_color(rgb, "bgr2gray").numpy(),
            "GRAY2RGB": F.nn.cvt_color(F.vision.cvt_color(rgb, "RGB2GRAY"), "GRAY2RGB").numpy()}


@case(rtol=1e-5, atol=1e-5, megengine_bug="cvt_color's float RGB2YUV reads its input as BGR "
      "(its Y is BGR2GRAY's) and YUV2RGB writes BGR")
def cvt_color_yuv_is_bgr() -> dict:
    import megengine as mge
    import megengine.functional as F

    rgb = np.random.RandomState(5).uniform(0, 1, (1, 4, 4, 3)).astype("float32")
    red_chroma = np.array([[[[0.5, 0.5, 1.0]]]], "float32")  # Y = 0.5, V above its centre
    got = {"Y": F.vision.cvt_color(mge.tensor(rgb), "RGB2YUV").numpy()[..., :1],
           "rgb": F.vision.cvt_color(mge.tensor(red_chroma), "YUV2RGB").numpy()}
    want = {"Y": F.vision.cvt_color(mge.tensor(rgb), "RGB2GRAY").numpy(),
            # R = Y + 1.140 (V - 0.5), G = Y - 0.581 (V - 0.5), B = Y (BT.601, OpenCV's floats)
            "rgb": np.array([[[[0.5 + 0.57, 0.5 - 0.2905, 0.5]]]], "float32")}
    return {"got": got, "want": want}


@case()
def warp_functions_in_every_namespace() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, mat = mge.tensor(data(2, 3, 7, 8)), mge.tensor(SCALING)
    return {"F.warp_perspective": F.warp_perspective(x, mat, (4, 5)).numpy(),
            "F.nn.warp_perspective": F.nn.warp_perspective(x, mat, (4, 5)).numpy(),
            "F.remap": F.remap(x, mge.tensor(_map_xy())).numpy(),
            "F.nn.warp_affine": F.nn.warp_affine(x, mat[:, :2], (4, 5), format="NCHW").numpy()}


# ----- what raises on both sides ------------------------------------------------------------------
@case()
def warp_perspective_affine_matrix_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.warp_perspective(mge.tensor(data(2, 3, 7, 8)), mge.tensor(SCALING[:, :2]),
                                    (4, 4)).numpy()}


@case(megengine_aborts=True)  # an assertion in MegEngine's worker thread, at times
def warp_perspective_mat_idx_out_of_range_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.warp_perspective(mge.tensor(data(2, 3, 7, 8)), mge.tensor(PERSPECTIVE),
                                    (4, 4), mat_idx=[0, 2]).numpy()}


@case()
def warp_perspective_nchw_nearest_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.warp_perspective(mge.tensor(data(2, 3, 7, 8)), mge.tensor(PERSPECTIVE),
                                    (4, 4), interp_mode="nearest").numpy()}


@case()
def remap_isolated_border_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.vision.remap(mge.tensor(data(2, 3, 7, 8)), mge.tensor(_map_xy()),
                                "isolated").numpy()}


@case()
def cvt_color_wrong_channel_count_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.vision.cvt_color(mge.tensor(data(1, 4, 4, 1)), "RGB2GRAY").numpy()}


@case()
def correlation_without_output_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(1, 2, 5, 6))
    return {"y": F.vision.correlation(x, x, max_displacement=3).numpy()}
