"""Parity cases for the detection functions of `F.vision` (also `F.nn`): roi_align,
roi_pooling and nms, values and input gradients.

MegEngine behaviour measured here and deliberately not copied (so left out of the cases):
- `roi_align(..., sample_points=0)` is documented as "take samples densely", but MegEngine
  1.13's CPU kernel then takes no samples and returns all zeros; here it raises (a count of
  at least 1 is required).
- A RoI whose batch index is outside [0, N) reads memory past the input in MegEngine (values
  like 1e-27 come back); here it reads an unspecified image of the batch.
- MegEngine refuses RoIs that are not float32 (an int32 or float16 (K, 5) tensor), boxes that
  are not float32 in `nms`, and a float16 input to `roi_pooling`; here RoIs and boxes are
  converted to float32 and `roi_pooling` runs in the input's float type.
- `nms(..., max_output=0)` kills MegEngine's process (SIGSEGV); here it raises
  (`nms_max_output_zero`).
"""

from __future__ import annotations

import numpy as np
from parity_cases import case, data, finite_difference, grads

# (batch index, x0, y0, x1, y1): inside, past the edges, inverted, a point, halves to round
ROIS = np.array([[0, 1.2, 0.5, 6.3, 5.1], [1, -2.0, -1.0, 3.0, 4.0], [1, 2.0, 3.0, 2.5, 3.2],
                 [0, 5.5, 2.5, 1.5, 7.5], [1, 3.0, 3.0, 3.0, 3.0], [0, 0.5, 1.5, 7.5, 6.5],
                 [1, 4.2, 0.0, 11.0, 9.0]], "float32")


def _boxes(n: int, seed: int) -> np.ndarray:
    rng = np.random.RandomState(seed)
    corner = rng.uniform(0, 30, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(1, 15, (n, 2))], 1).astype("float32")


@case(rtol=1e-5, atol=1e-5)
def roi_align_values() -> dict:
    """Values only: MegEngine's gradients depend on what its memory held before (the bug case
    below); in a fresh process they agreed with this project's to 1e-7."""
    import megengine as mge
    import megengine.functional as F

    x, rois = mge.tensor(data(2, 3, 8, 9)), mge.tensor(ROIS)
    out = {}
    for mode in ("average", "max"):
        for aligned in (True, False):
            for shape, samples, scale in (((2, 3), 2, 1.0), ((3, 2), (1, 3), 0.5), (1, 4, 1.0)):
                key = f"{mode}/{aligned}/{shape}/{samples}/{scale}"
                out[key] = F.vision.roi_align(x, rois, shape, mode, scale, samples,
                                              aligned).numpy()
    return out


def _dirty_memory(shape: tuple) -> None:
    """Free eight blocks of `shape` float32s that hold 1e6, for the allocator to hand out next
    (what a buffer nobody clears then shows)."""
    import megengine as mge

    blocks = [mge.tensor(np.zeros(shape, "float32")) + 1e6 for _ in range(8)]
    for block in blocks:
        block.numpy()


@case(rtol=1e-3, atol=2e-3, megengine_bug="roi_align's backward adds into a gradient buffer it "
      "never clears on the CPU: the input gradient holds what that memory held before (1e6 "
      "here, values up to 1e37 or NaN in a long run); only a fresh process's zeroed memory "
      "gives the right one")
def roi_align_gradient_in_used_memory() -> dict:
    import megengine as mge
    import megengine.functional as F

    rois, x = mge.tensor(ROIS), data(2, 3, 8, 9)
    points = list(range(0, x.size, 7))
    got, want = {}, {}
    for mode in ("average", "max"):
        weight = mge.tensor(data(7, 3, 2, 3, seed=7))

        def f(t, mode=mode, weight=weight):
            return F.vision.roi_align(t, rois, (2, 3), mode) * weight

        reference = finite_difference(lambda a, f=f: float(f(mge.tensor(a)).sum().numpy()),
                                        x, points)
        for attempt in range(2):
            _dirty_memory(x.shape)
            _, (g,) = grads(f, x)
            got[f"{mode}/{attempt}"], want[f"{mode}/{attempt}"] = g.ravel()[points], reference
    return {"got": got, "want": want}


@case(rtol=1e-5, atol=1e-5)
def roi_pooling_values_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    rois = mge.tensor(ROIS[[0, 1, 2, 4, 5, 6]])  # not the inverted one: see the bug case
    relu = np.maximum(data(2, 3, 8, 9), 0)  # ties at 0: the gradient goes to the first
    out = {}
    for mode in ("max", "average"):
        for shape, scale in (((2, 3), 1.0), ((3, 2), 0.5), (4, 1.0), ((1, 1), 0.25)):
            for name, x in (("normal", data(2, 3, 8, 9)), ("relu", relu)):
                def f(x, mode=mode, shape=shape, scale=scale):
                    y = F.vision.roi_pooling(x, rois, shape, mode, scale)
                    return y * mge.tensor(data(*y.shape, seed=7))

                key = f"{mode}/{shape}/{scale}/{name}"
                out[key], (out[key + ".grad"],) = grads(f, x)
    return out


@case(megengine_bug="roi_pooling's backward gives no gradient to an inverted RoI (x1 < x0 or "
      "y1 < y0), which its forward pools as the one pixel at (x0, y0)")
def roi_pooling_inverted_roi_gradient() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = np.arange(36, dtype="float32").reshape(1, 1, 6, 6)
    rois = mge.tensor(np.array([[0, 4, 3, 2, 1]], "float32"))
    got, want = {}, {}
    for mode in ("max", "average"):
        y, (g,) = grads(lambda t, mode=mode: F.vision.roi_pooling(t, rois, (2, 2), mode), x)
        got[mode] = g
        # every bin read one pixel (its value tells which: x's values are distinct), so the
        # gradient of the sum is the bin count there
        want[mode] = np.where(x == y.ravel()[0], float(y.size), 0.0).astype("float32")
    return {"got": got, "want": want}


@case(rtol=1e-5, atol=1e-5)
def roi_functions_in_the_nn_namespace() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, rois = mge.tensor(data(2, 2, 6, 7, seed=3)), mge.tensor(ROIS[:3])
    return {"align": F.nn.roi_align(x, rois, (2, 2)).numpy(),
            "pooling": F.nn.roi_pooling(x, rois, (2, 2)).numpy(),
            "nms": F.nn.nms(mge.tensor(_boxes(20, 1)), mge.tensor(data(20, seed=1)),
                            0.3).numpy()}


@case(rtol=1e-3, atol=1e-3)
def roi_align_computes_in_float32() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(data(1, 2, 6, 6, seed=4).astype("float16"))
    return {"y": F.vision.roi_align(x, mge.tensor(ROIS[:1]), 2).numpy()}


@case()
def nms_kept_indices() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    for n, thresh, max_output, seed in ((1, 0.5, None, 0), (30, 0.5, None, 1),
                                        (200, 0.3, 20, 2), (200, 0.7, None, 3),
                                        (50, 0.0, None, 4), (50, 1.0, 5, 5)):
        boxes, scores = _boxes(n, seed), data(n, seed=seed)
        key = f"{n}/{thresh}/{max_output}"
        out[key] = F.vision.nms(mge.tensor(boxes), mge.tensor(scores), thresh,
                                max_output).numpy()
    return out


@case()
def nms_equal_scores_and_edge_cases() -> dict:
    """Equal scores (the later box goes first), integer scores, an IoU exactly at the
    threshold (kept), no boxes."""
    import megengine as mge
    import megengine.functional as F

    boxes = _boxes(60, 6)
    tied = np.random.RandomState(6).randint(0, 4, 60)
    touching = mge.tensor(np.array([[0, 0, 2, 1], [1, 0, 3, 1]], "float32"))
    two = mge.tensor(np.array([1.0, 0.5], "float32"))
    return {"tied": F.vision.nms(mge.tensor(boxes), mge.tensor(tied.astype("float32")),
                                 0.2).numpy(),
            "int_scores": F.vision.nms(mge.tensor(boxes), mge.tensor(tied.astype("int32")),
                                       0.2).numpy(),
            "at_threshold": F.vision.nms(touching, two, 1 / 3).numpy(),
            "above_threshold": F.vision.nms(touching, two, 0.33).numpy(),
            "empty": F.vision.nms(mge.tensor(np.zeros((0, 4), "float32")),
                                  mge.tensor(np.zeros(0, "float32")), 0.5).numpy()}


@case(megengine_aborts=True)
def nms_max_output_zero() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.vision.nms(mge.tensor(_boxes(5, 0)), mge.tensor(data(5)), 0.5,
                              max_output=0).numpy()}


@case()
def nms_boxes_of_three_columns_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.vision.nms(mge.tensor(_boxes(5, 0)[:, :3]), mge.tensor(data(5)),
                              0.5).numpy()}


@case()
def roi_align_unknown_mode_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.vision.roi_align(mge.tensor(data(1, 1, 4, 4)), mge.tensor(ROIS[:1]), 2,
                                    mode="sum").numpy()}


@case()
def roi_pooling_of_3d_input_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.vision.roi_pooling(mge.tensor(data(1, 4, 4)), mge.tensor(ROIS[:1]),
                                      2).numpy()}
