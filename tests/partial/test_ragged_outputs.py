"""A region may return a tensor whose size depends on the data (MegEngine's `trace` returns
`x[x > 0]`): its padded storage and its length leave the program as two outputs (decision 15),
and the caller gets a ragged tensor of the right size on every call, with gradients through
it, from one executable; keeping one in state, or exporting one, is still refused."""

from __future__ import annotations

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
from eager.autodiff import GradManager
from partial import ExportError, partial_trace, xla_trace
from partial.errors import UnsupportedOutputError

VALUES = [[1.0, -2.0, 3.0, -0.5, 4.0, 0.25], [-1.0, -2.0, 3.0, -0.5, -4.0, -3.0],
          [1.0, 2.0, 3.0, 5.0, 4.0, 6.0], [-1.0, -2.0, -3.0, -5.0, -4.0, -6.0]]
WRAPS = {"eager": lambda f: f, "partial_trace": partial_trace,
         "graph_breaks": lambda f: partial_trace(f, graph_breaks=True)}


def _selections(x, w):
    y = x * w
    pos = y[y > 0]
    return pos, F.cond_take(y < 0, y)[0], (pos * 2).sum() + y.mean()


def _train(wrap, values):
    """Per call: each output's values and shape, the gradients of x and w."""
    x, w = eg.Parameter(np.zeros(6, np.float32)), eg.Parameter(np.linspace(0.5, 1.5, 6))
    region = WRAPS[wrap](_selections)
    gm = GradManager().attach([x, w])
    got = []
    for v in values:
        x._reset(np.array(v, np.float32))
        x.grad = w.grad = None
        with gm:
            pos, neg, dense = region(x, w)
            gm.backward((pos ** 2).sum() + neg.sum() * 3 + dense)
        got.append([o.numpy() for o in (pos, neg, dense)] + [x.grad.numpy(), w.grad.numpy()])
    return got, region


@pytest.mark.parametrize("wrap", ["partial_trace", "graph_breaks"])
def test_returned_selections_equal_eager_with_gradients(wrap):
    want, _ = _train("eager", VALUES)
    got, region = _train(wrap, VALUES)
    for call, (g, e) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(g, e)):
            assert a.shape == b.shape, (call, i)
            np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=f"call {call}, output {i}")
    if wrap == "partial_trace":  # one program whatever the count, empty included
        assert region.cache_info().captures == 1


def test_xla_trace_returns_a_selection_of_the_right_size():
    """MegEngine's `test_tracing.py` (boolean-mask indexing in a traced function)."""
    @xla_trace
    def f(x):
        return x[x > 0]

    for v in VALUES:
        out = f(eg.tensor(np.array(v, np.float32)))
        want = np.array(v, np.float32)[np.array(v) > 0]
        assert out.shape == want.shape and len(out) == len(want)
        np.testing.assert_array_equal(out.numpy(), want)
        np.testing.assert_array_equal((out * 2).numpy(), want * 2)  # usable as any tensor
    assert f.cache_info().captures == 1


def test_a_returned_selection_in_a_structure_and_from_a_module():
    class Head(M.Module):
        def forward(self, scores):
            keep = scores > 0.5
            return {"kept": scores[keep], "index": F.nonzero(keep), "count": keep.sum()}

    head = partial_trace(Head())
    for v in ([0.1, 0.9, 0.7, 0.2], [0.9, 0.9, 0.9, 0.9], [0.0, 0.1, 0.2, 0.3]):
        out = head(eg.tensor(np.array(v, np.float32)))
        a = np.array(v, np.float32)
        np.testing.assert_array_equal(out["kept"].numpy(), a[a > 0.5])
        np.testing.assert_array_equal(out["index"].numpy().reshape(-1), np.nonzero(a > 0.5)[0])
        assert out["count"].item() == (a > 0.5).sum()


def test_keeping_a_selection_in_state_is_still_refused():
    buf = eg.tensor(np.zeros(4, np.float32))

    @partial_trace
    def f(x):
        buf.set_value(x[x > 0])
        return x.sum()

    with pytest.raises(UnsupportedOutputError, match="Return it instead"):
        f(eg.tensor(np.array([1.0, -1.0, 2.0, 3.0], np.float32)))


def test_exporting_a_selection_is_refused():
    @partial_trace
    def f(x):
        return x[x > 0]

    with pytest.raises(ExportError, match="size depends on the data"):
        f.export(eg.tensor(np.array([1.0, -1.0], np.float32)))
