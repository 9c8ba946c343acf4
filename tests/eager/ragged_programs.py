"""Programs over a boolean selection, run on ragged tensors and on exact arrays by the ragged
tests (tests/eager/test_ops_ragged.py, tests/partial/test_ragged.py).

Each program takes a source `x` (n, d), a weight `w` (d, d), a bool mask `m` (n,) and int labels
`lab` (n,) in [0, d), selects with the mask, and returns a tuple of tensors whose first is the
scalar loss. `REGION_SAFE` are those that never need the selection's exact size, so they also
compile inside regions.
"""

from __future__ import annotations

import numpy as np

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager


def _sel(x, m):
    return x[m]


PROGRAMS = {
    # elementwise, with the same length and broadcasting a dense (d,) and a scalar
    "elementwise": lambda x, w, m, lab: (
        (F.exp(_sel(x, m) * 0.5) + _sel(x, m).abs() * w[0] - F.sigmoid(_sel(x, m)) / 2).sum(),),
    "binary same length": lambda x, w, m, lab: (
        (F.maximum(_sel(x, m), _sel(x * 2 + w[1], m)) * _sel(x, m)).mean(),),
    # reductions over the ragged axis
    "sum mean": lambda x, w, m, lab: (
        _sel(x, m).sum() + _sel(x, m).mean(axis=0).sum() + _sel(x @ w, m).mean(),),
    "max min": lambda x, w, m, lab: (
        _sel(x, m).max() - _sel(x, m).min(axis=0).sum() + (_sel(x, m) @ w).max(axis=0).sum(),),
    "prod": lambda x, w, m, lab: ((_sel(x, m) * 0.1 + 1).prod(axis=0).sum(),),
    "var std": lambda x, w, m, lab: (
        F.var(_sel(x, m), axis=0).sum() + F.std(_sel(x, m) + w[0], unbiased=True),),
    "logsumexp": lambda x, w, m, lab: (F.logsumexp(_sel(x, m) @ w, axis=0).sum(),),
    "norm": lambda x, w, m, lab: (
        F.norm(_sel(x, m), axis=0).sum() + F.norm(_sel(x, m) @ w, ord=1),),
    "argmax argmin": lambda x, w, m, lab: (
        _sel(x, m).sum() * 0, F.argmax(_sel(x, m), axis=0), F.argmin(_sel(x, m)),
        _sel(x, m).argmax(axis=1)),
    "any all": lambda x, w, m, lab: (
        _sel(x, m).sum() * 0, (_sel(x, m) > 0.5).any(axis=0), (_sel(x, m) > -2).all()),
    # losses and their reductions
    "losses": lambda x, w, m, lab: (
        F.smooth_l1_loss(_sel(x, m), _sel(x, m) * 0.5 + w[0])
        + F.l1_loss(_sel(x @ w, m), _sel(x, m), reduction="sum")
        + F.mse_loss(_sel(x, m), _sel(x, m).detach() * 0.3)
        + F.binary_cross_entropy(_sel(x, m)[:, 0], (_sel(x, m)[:, 0] > 0).astype("float32")),),
    "cross entropy": lambda x, w, m, lab: (
        F.cross_entropy(_sel(x @ w, m), _sel(lab, m))
        + F.cross_entropy(_sel(x, m), _sel(lab, m), reduction="sum", label_smooth=0.1),
        F.cross_entropy(_sel(x, m), _sel(lab, m), reduction="none")),
    # reductions over other axes, matmul and linear with the ragged axis as batch
    "rows": lambda x, w, m, lab: (
        (F.softmax(_sel(x, m) @ w, axis=1) * _sel(x, m)).sum(axis=1).mean()
        + F.linear(_sel(x, m), w, w[0]).sum(),
        F.log_softmax(_sel(x, m), axis=-1)),
    # slicing and indexing of the other axes; gather with a ragged index
    "index other axes": lambda x, w, m, lab: (
        _sel(x, m)[:, :1].sum() + _sel(x, m)[..., -1].mean() + _sel(x, m)[:, None, 0].sum(),
        _sel(x, m)[:, ::-1]),
    "gather": lambda x, w, m, lab: (
        F.gather(_sel(x, m), 1, _sel(lab, m).reshape(-1, 1) % x.shape[1]).sum()
        + w[_sel(lab, m)].sum() + F.indexing_one_hot(_sel(x, m), _sel(lab, m) % x.shape[1],
                                                     1).mean(),),
    "select again": lambda x, w, m, lab: (
        _sel(_sel(x, m), _sel(x, m)[:, 0] > 0).sum() + 1,),
    "where clip": lambda x, w, m, lab: (
        F.where(_sel(x, m) > 0, _sel(x, m), _sel(x, m) * w[0]).sum()
        + F.clip(_sel(x, m), -0.5, 0.5).sum(),),
    # ops that need the exact size: they materialize (eager) and are refused in regions
    "reshape across": lambda x, w, m, lab: (_sel(x, m).reshape(-1).sum() + 1,
                                            _sel(x, m).flatten()),
    "concat sort": lambda x, w, m, lab: (
        F.concat([_sel(x, m), _sel(x, m) * 2]).mean(axis=1).sum() + 1,
        F.sort(_sel(x, m)[:, 0])[0], F.cumsum(_sel(x, m), axis=0)),
    "numpy": lambda x, w, m, lab: (_sel(x, m).sum(), eg.tensor(_sel(x, m).numpy() + 1)),
    # ops whose result's length is not their input's (eager/core/ragged_forms.py)
    "concat rows": lambda x, w, m, lab: _concat_rows(x, w, m),
    "slices": lambda x, w, m, lab: (
        (_sel(x, m)[:-1] * 2).sum() + _sel(x, m)[1:].mean(axis=1).sum()
        + (_sel(x, m)[:2] @ w).sum() + _sel(x, m)[1:4, 0].sum(),
        _sel(x, m)[2:]),
    "topk sort": lambda x, w, m, lab: _topk_sort(x, w, m),
    "count-sized": lambda x, w, m, lab: _count_sized(x, w, m),
    "sampler": lambda x, w, m, lab: _sampler(x, w, m),
}

REGION_SAFE = sorted(set(PROGRAMS) - {"reshape across", "concat sort", "numpy", "count-sized",
                                      "sampler"})


def _concat_rows(x, w, m):
    a, b = _sel(x, m), _sel(x * 3 + w[0], ~m)
    both = F.concat([a, w, b * 0.5])
    return (both.sum() + (F.concat([a, b]) @ w).max(axis=1).sum(), both,
            F.concat([a[:, :1], a], axis=1))


def _topk_sort(x, w, m):
    col = _sel(x @ w, m)[:, 0]
    values, where = F.topk(col, 3)
    low, _ = F.topk(col, -2, descending=True)
    ordered, _ = F.sort(col, descending=True)
    return (values.sum() + low.sum() * 2 + (ordered * F.argsort(col).astype("float32")).sum(),
            where, F.argsort(col, descending=True))


def _count_sized(x, w, m):
    """Tensors made at a ragged length: fills, a draw, a top-k by a count tensor."""
    sel = _sel(x, m)
    eg.random.seed(3)
    noise = eg.random.uniform(size=sel.shape[0]) + eg.random.normal(size=(len(sel), 1))[:, 0]
    marks = F.full((sel.shape[0], 1), 2.0)
    count = (sel[:, 0] > 0).sum()
    top, _ = F.topk(x[:, 0], k=F.maximum(count, 1))
    return ((F.concat([sel, marks], axis=1) * (1 + noise.reshape(-1, 1))).sum() + top.sum()
            + F.zeros_like(sel).sum(), noise, top)


def _sampler(x, w, m):
    """The zoo's label sampler (`layers/det/sampling.py`) on a selection: random scores set
    through a mask, the surplus found by a top-k of a count tensor and reset."""
    sel = _sel(x, m)
    labels = (sel[:, 0] > 0).astype("int32")
    chosen = labels == 1
    valid = chosen.sum()
    eg.random.seed(5)
    if valid > 1:
        scores = F.zeros_like(labels).astype("float32")
        scores[chosen] = eg.random.uniform(size=valid)
        _, surplus = F.topk(scores, k=1 - valid)
        labels[surplus] = -1
    weights = F.zeros_like(sel[:, 0])
    weights[labels == 1] = sel[:, 0][labels == 1] * 2
    return (weights * sel[:, -1]).sum() + sel.sum(), labels, weights


def inputs(n: int, d: int, mask: np.ndarray, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return dict(x=rng.normal(size=(n, d)).astype(np.float32),
                w=rng.normal(size=(d, d)).astype(np.float32),
                m=np.asarray(mask, bool), lab=rng.integers(0, d, n).astype(np.int32))


def run_program(name: str, n: int, d: int, mask: np.ndarray, seed: int):
    """(outputs, [grad of x], [grad of w]) as numpy, or the exception the program raised."""
    data = inputs(n, d, mask, seed)
    x, w = eg.Parameter(data["x"]), eg.Parameter(data["w"])
    gm = GradManager().attach([x, w])
    try:
        with gm:
            outs = PROGRAMS[name](x, w, eg.tensor(data["m"]), eg.tensor(data["lab"]))
            gm.backward(outs[0])
    except (ValueError, TypeError, IndexError) as e:
        return e
    grads = [[None if p.grad is None else p.grad.numpy()] for p in (x, w)]
    return [o.numpy() for o in outs], *grads
