"""Parity cases for logaddexp, dot, diag, roll, swapaxes, meshgrid, matinv, svd and
topk_accuracy (their wrappers: eager/functional/elemwise.py, math.py, tensor.py, metric.py).

Inputs where real MegEngine 1.13 is wrong on the CPU are left out, not copied:
- `logaddexp(-inf, -inf)` and `logaddexp(inf, inf)` give nan there (-inf and inf here, numpy's);
- `diag` of a (3, 4) matrix with k=5 returns values read past the matrix (k=4 raises): here
  every k without a diagonal raises;
- `matinv` of a singular matrix aborts the process (here: inf or nan entries, no error);
- `svd(full_matrices=True)` raises on the CPU and `svd(compute_uv=False)` raises while unpacking
  its one output: here they return the full factors, and S alone, as MegEngine documents.
Singular vectors are unique up to sign: the svd cases compare sign-free quantities.
"""

from __future__ import annotations

import numpy as np
from parity_cases import case, data, grads


def _with_grads(fn, *arrays):
    """fn(*tensors) (a tuple of tensors) as numpy, and the gradient of the sum of each output
    weighted by its position (1, 2, ...) with respect to every input."""
    import megengine as mge
    from megengine.autodiff import GradManager

    xs = [mge.tensor(a) for a in arrays]
    gm = GradManager().attach(xs)
    with gm:
        outs = fn(*xs)
        loss = outs[0].sum()
        for i, o in enumerate(outs[1:]):
            loss = loss + (o * float(i + 2)).sum()
        gm.backward(loss)
    return [o.numpy() for o in outs], [x.grad.numpy() for x in xs]


# ----- logaddexp, dot ---------------------------------------------------------------------------
@case()
def logaddexp_broadcasting_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    x, y = data(3, 1, seed=1) * 3, data(4, seed=2) * 3
    y[0] = -1000.0  # far below: the result is x, exactly
    out, (gx, gy) = grads(F.logaddexp, x, y)
    ints = F.logaddexp(mge.tensor(np.array([1, 2], "int32")), mge.tensor(np.array([3, 4], "int32")))
    return {"y": out, "gx": gx, "gy": gy, "ints": ints.numpy()}


@case()
def dot_of_vectors_and_scalars() -> dict:
    import megengine as mge
    import megengine.functional as F

    out, (ga, gb) = grads(F.dot, data(5, seed=3), data(5, seed=4))
    ints = F.dot(mge.tensor(np.array([1, 2, 3], "int32")), mge.tensor(np.array([4, 5, 6], "int32")))
    scalars = F.dot(mge.tensor(np.float32(2.0)), mge.tensor(np.float32(3.0)))
    return {"y": out, "ga": ga, "gb": gb, "ints": ints.numpy(), "scalars": scalars.numpy()}


@case()
def dot_of_a_matrix_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.dot(mge.tensor(data(2, 3)), mge.tensor(data(3))).numpy()}


# ----- diag -------------------------------------------------------------------------------------
@case()
def diag_builds_a_matrix() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    for k in (0, 1, -2):
        y, (g,) = grads(lambda x, k=k: F.diag(x, k) * mge.tensor(data(3 + abs(k), 3 + abs(k))),
                        data(3, seed=5))
        out[f"k={k}"], out[f"grad k={k}"] = y, g
    out["ints"] = F.diag(mge.tensor(np.array([1, 2, 3], "int32")), k=1).numpy()
    out["0-d"] = F.diag(mge.tensor(np.float32(4.0))).numpy()
    return out


@case()
def diag_reads_a_diagonal() -> dict:
    import megengine.functional as F

    out = {}
    for k in (0, 1, 3, -1, -2):  # k=5 left out: MegEngine reads past the matrix there
        y, (g,) = grads(lambda x, k=k: F.diag(x, k) * np.float32(k + 10), data(3, 4, seed=6))
        out[f"k={k}"], out[f"grad k={k}"] = y, g
    return out


@case()
def diag_without_that_diagonal_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.diag(mge.tensor(data(3, 4)), k=4).numpy()}


@case()
def diag_of_three_axes_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.diag(mge.tensor(data(2, 2, 2))).numpy()}


# ----- roll, swapaxes ---------------------------------------------------------------------------
@case()
def roll_by_axes_and_flattened() -> dict:
    import megengine as mge
    import megengine.functional as F

    x = mge.tensor(np.arange(6, dtype="int32").reshape(3, 2))
    out = {"axis 0": F.roll(x, 1, 0).numpy(), "flat": F.roll(x, 1).numpy(),
           "tuple": F.roll(x, (1, -1), (0, 1)).numpy(),
           "repeated": F.roll(x, (1, 1), (0, 0)).numpy(),
           "list": F.roll(x, [3, -5], [-1, -2]).numpy(),
           "far": F.roll(mge.tensor(np.arange(4, dtype="int32")), -7).numpy(),
           "0-d": F.roll(mge.tensor(np.float32(3.0)), 2).numpy()}
    w = mge.tensor(data(2, 3, 4, seed=7))
    y, (g,) = grads(lambda t: F.roll(t, (2, -1), (1, 2)) * w, data(2, 3, 4, seed=8))
    out["y"], out["grad"] = y, g
    return out


@case()
def roll_axis_out_of_range_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.roll(mge.tensor(data(4)), 1, 1).numpy()}


@case()
def roll_shifts_and_axes_of_different_lengths_raise() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.roll(mge.tensor(data(2, 2)), (1, 2), (0,)).numpy()}


@case()
def swapaxes_values_and_grad() -> dict:
    import megengine as mge
    import megengine.functional as F

    w = mge.tensor(data(4, 3, 2, seed=9))
    y, (g,) = grads(lambda t: F.swapaxes(t, 0, -1) * w, data(2, 3, 4, seed=10))
    same = F.swapaxes(mge.tensor(data(2, 3)), 1, 1)
    return {"y": y, "grad": g, "same": same.numpy()}


@case()
def swapaxes_axis_out_of_range_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.swapaxes(mge.tensor(data(2, 3)), 0, 2).numpy()}


# ----- meshgrid ---------------------------------------------------------------------------------
@case()
def meshgrid_indexing_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    for indexing in ("xy", "ij"):
        ys, gs = _with_grads(lambda a, b, c, i=indexing: F.meshgrid(a, b, c, indexing=i),
                             data(3, seed=11), data(2, seed=12), data(4, seed=13))
        out[indexing], out[f"grads {indexing}"] = ys, gs
    ints = F.meshgrid(mge.tensor(np.array([1, 2, 3], "int32")),
                      mge.tensor(np.array([4, 5], "int32")))
    one = F.meshgrid(mge.tensor(data(3)))
    scalar = F.meshgrid(mge.tensor(np.float32(1.0)), mge.tensor(data(2)))
    return {**out, "is tuple": isinstance(one, tuple), "one": [g.numpy() for g in one],
            "0-d": [g.numpy() for g in scalar], "int32": [g.numpy() for g in ints]}


@case()
def meshgrid_of_mixed_dtypes_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    grids = F.meshgrid(mge.tensor(np.array([1, 2], "int32")), mge.tensor(data(2)))
    return {"y": [g.numpy() for g in grids]}


@case()
def meshgrid_of_a_matrix_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": [g.numpy() for g in F.meshgrid(mge.tensor(data(1, 2)), mge.tensor(data(2)))]}


# ----- matinv, svd ------------------------------------------------------------------------------
def _well_conditioned(*shape: int, seed: int = 0) -> np.ndarray:
    return data(*shape, seed=seed) + 3 * np.eye(shape[-1], dtype="float32")


@case(rtol=1e-4, atol=1e-5)
def matinv_values_and_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    y, (g,) = grads(lambda t: F.matinv(t) * mge.tensor(data(2, 3, 3, seed=14)),
                    _well_conditioned(2, 3, 3, seed=15))
    half = F.matinv(mge.tensor(np.array([[2, 0], [1, 1]], "float16")))
    empty = F.matinv(mge.tensor(np.zeros((0, 0), "float32")))
    return {"y": y, "grad": g, "float16": half.numpy(), "empty": empty.numpy()}


@case()
def matinv_of_a_non_square_matrix_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.matinv(mge.tensor(data(2, 3))).numpy()}


@case()
def matinv_of_integers_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"y": F.matinv(mge.tensor(np.eye(2, dtype="int32"))).numpy()}


def _sign_free(u: np.ndarray, vh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """U and Vh with each singular pair's sign chosen so that U's largest entry is positive."""
    idx = np.abs(u).argmax(axis=-2)[..., None, :]
    sign = np.sign(np.take_along_axis(u, idx, axis=-2))
    return u * sign, vh * np.swapaxes(sign, -1, -2)


@case(rtol=1e-4, atol=1e-5)
def svd_factors() -> dict:
    import megengine as mge
    import megengine.functional as F

    out = {}
    for name, shape in (("tall", (4, 3)), ("wide", (3, 5)), ("batch", (2, 3, 3))):
        u, s, vh = (t.numpy() for t in F.svd(mge.tensor(data(*shape, seed=16))))
        u, vh = _sign_free(u, vh)
        out[name] = {"u": u, "s": s, "vh": vh, "shapes": [list(u.shape), list(vh.shape)]}
    return out


@case(rtol=1e-3, atol=1e-4)
def svd_grads() -> dict:
    import megengine as mge
    import megengine.functional as F

    w = data(4, 3, seed=17)
    _, (gs,) = grads(lambda t: F.svd(t)[1] * mge.tensor(np.float32([1.0, -2.0, 0.5])),
                     data(4, 3, seed=18))

    def sign_free_loss(t):  # squares of the vectors: the same whatever their signs
        u, s, vh = F.svd(t)
        return (u * u * mge.tensor(w)).sum() + s.sum() + (vh * vh * mge.tensor(w[:3])).sum()

    _, (gv,) = grads(sign_free_loss, data(4, 3, seed=18))
    return {"grad of S": gs, "grad of vectors": gv}


@case()
def svd_of_a_vector_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"s": F.svd(mge.tensor(data(3)))[1].numpy()}


@case()
def svd_of_integers_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    return {"s": F.svd(mge.tensor(np.eye(2, dtype="int32")))[1].numpy()}


# ----- topk_accuracy ----------------------------------------------------------------------------
def _ranked_logits() -> np.ndarray:
    """Logits without ties (the order among ties is unspecified): rows of a permutation."""
    rng = np.random.RandomState(19)
    return np.stack([rng.permutation(5) for _ in range(8)]).astype("float32") / 4


@case()
def topk_accuracy_one_and_several_k() -> dict:
    import megengine as mge
    import megengine.functional as F

    logits = mge.tensor(_ranked_logits())
    target = mge.tensor(np.random.RandomState(20).randint(0, 5, 8).astype("int32"))
    several = F.topk_accuracy(logits, target, (1, 2, 5))
    return {"default": F.topk_accuracy(logits, target).numpy(),
            "k=3": F.topk_accuracy(logits, target, 3).numpy(),
            "(2,)": F.topk_accuracy(logits, target, (2,)).numpy(),
            "several": [a.numpy() for a in several], "is list": isinstance(several, list),
            "float target": F.topk_accuracy(logits, target.astype("float32"), 2).numpy()}


@case()
def topk_accuracy_k_past_the_classes_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    acc = F.topk_accuracy(mge.tensor(_ranked_logits()), mge.tensor(np.zeros(8, "int32")), 6)
    return {"acc": acc.numpy()}


@case()
def topk_accuracy_target_of_another_length_raises() -> dict:
    import megengine as mge
    import megengine.functional as F

    acc = F.topk_accuracy(mge.tensor(_ranked_logits()), mge.tensor(np.zeros(7, "int32")))
    return {"acc": acc.numpy()}
