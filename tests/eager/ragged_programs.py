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
}

REGION_SAFE = sorted(set(PROGRAMS) - {"reshape across", "concat sort", "numpy"})


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
