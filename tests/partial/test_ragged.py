"""Boolean selections inside regions: a selection whose size Python never reads
compiles into the region as a fixed-capacity masked computation (one executable for every
count) and equals eager code; reading its size is a `ValueReadError`, or a graph break."""

from __future__ import annotations

import numpy as np
import pytest

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import ValueReadError, partial_trace, xla_trace
from tests.eager.ragged_programs import PROGRAMS, REGION_SAFE, inputs

N, D = 10, 3
# counts 5 to 8: one capacity (8) for the eager reference, which compiles per capacity; the
# region's capacity is fixed (N) whatever the count. Counts 0, 1 and N: test_counts_at_the_edges.
MASKS = [np.array(m, bool) for m in (
    [1, 0, 0, 1, 1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 1, 0, 1, 0, 1, 0],
    [1, 1, 1, 1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1, 0, 1, 1])]
BREAK_PROGRAMS = ["elementwise", "losses", "gather", "select again"]


def _all_programs(x, w, m, lab, names=REGION_SAFE):
    """The programs' losses (their sum is differentiated) and dense outputs."""
    losses, dense = [], []
    for name in names:
        outs = PROGRAMS[name](x, w, m, lab)
        losses.append(outs[0])
        dense += [o for o in outs[1:] if eg.hooks.ragged_length(o) is None]
    return losses, dense


def _eager_reference(data, names=REGION_SAFE):
    x, w = eg.Parameter(data["x"]), eg.Parameter(data["w"])
    gm = GradManager().attach([x, w])
    with gm:
        losses, dense = _all_programs(x, w, eg.tensor(data["m"]), eg.tensor(data["lab"]), names)
        gm.backward(sum(losses[1:], losses[0]))
    return [t.numpy() for t in losses + dense], x.grad.numpy(), w.grad.numpy()


def _check(got, want):
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6,
                                   err_msg=f"output {i} ({(REGION_SAFE + ['dense'] * 99)[i]})")


@pytest.mark.slow
def test_xla_trace_selections_compile_once_and_equal_eager():
    x, w = eg.Parameter(np.zeros((N, D), np.float32)), eg.Parameter(np.zeros((D, D), np.float32))
    gm = GradManager().attach([x, w])

    @xla_trace
    def step(m, lab):
        with gm:
            losses, dense = _all_programs(x, w, m, lab)
            gm.backward(sum(losses[1:], losses[0]))
        return losses + dense

    for seed, mask in enumerate(MASKS):
        data = inputs(N, D, mask, seed)
        want, gx, gw = _eager_reference(data)
        x._assign(eg.tensor(data["x"]))
        w._assign(eg.tensor(data["w"]))
        x.grad = w.grad = None
        got = [t.numpy() for t in step(eg.tensor(data["m"]), eg.tensor(data["lab"]))]
        _check(got, want)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-6)
    assert step.cache_info().captures == 1  # one executable for every count


@pytest.mark.slow
@pytest.mark.parametrize("graph_breaks", [False, True])
def test_partial_trace_selection_equals_eager(graph_breaks):
    x, w = eg.Parameter(np.zeros((N, D), np.float32)), eg.Parameter(np.zeros((D, D), np.float32))
    gm = GradManager().attach([x, w])

    names = BREAK_PROGRAMS if graph_breaks else REGION_SAFE  # with breaks: a stretch each

    @partial_trace(graph_breaks=graph_breaks)
    def head(m, lab):
        losses, dense = _all_programs(x, w, m, lab, names)
        return losses + dense

    for seed, mask in enumerate(MASKS[:3]):
        data = inputs(N, D, mask, seed)
        want, gx, gw = _eager_reference(data, names)
        x._assign(eg.tensor(data["x"]))
        w._assign(eg.tensor(data["w"]))
        x.grad = w.grad = None
        with gm:
            outs = head(eg.tensor(data["m"]), eg.tensor(data["lab"]))
            losses = outs[:len(names)]
            gm.backward(sum(losses[1:], losses[0]))
        _check([t.numpy() for t in outs], want)
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-6)
    if not graph_breaks:
        assert head.cache_info().captures == 1


def _ohem_model(seed=0):
    eg.random.seed(seed)
    net = M.Sequential(M.Linear(6, 16), M.ReLU(), M.Linear(16, 4))
    gm = GradManager().attach(net.parameters())
    return net, gm, optim.SGD(net.parameters(), lr=0.1, momentum=0.9)


def _ohem_step(net, gm, opt, x, y):
    with gm:
        per_sample = F.cross_entropy(net(x), y, reduction="none")
        loss = per_sample[per_sample >= per_sample.mean()].mean()
        gm.backward(loss)
    opt.step().clear_grad()
    return loss


def test_ohem_training_xla_trace_equals_eager_with_one_compile():
    """The OHEM idiom in a whole-step `xla_trace`: one compile for 12 steps whose counts vary,
    the same losses, parameters and momentum as eager code."""
    ref, comp = _ohem_model(), _ohem_model()
    step = xla_trace(lambda x, y: _ohem_step(*comp, x, y))
    rng = np.random.default_rng(2)  # batches whose hard-example counts vary (8 counts)
    counts = set()
    for _ in range(12):
        x = eg.tensor(rng.normal(size=(32, 6)).astype(np.float32))
        y = eg.tensor(rng.integers(0, 4, 32).astype(np.int32))
        per_sample = F.cross_entropy(ref[0](x), y, reduction="none").numpy()
        counts.add(int((per_sample >= per_sample.mean()).sum()))
        np.testing.assert_allclose(step(x, y).item(), _ohem_step(*ref, x, y).item(), rtol=1e-5)
    assert len(counts) > 4 and step.cache_info().captures == 1
    for p, q in zip(ref[0].parameters(), comp[0].parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    for p, q in zip(ref[0].parameters(), comp[0].parameters()):
        np.testing.assert_allclose(comp[2].state[q]["momentum_buffer"].numpy(),
                                   ref[2].state[p]["momentum_buffer"].numpy(), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("read", ["len", "shape", "int", "arith", "numpy"])
def test_reading_the_size_in_a_region_is_a_value_read(read):
    reads = {"len": lambda r: len(r), "shape": lambda r: r.shape[0] > 2,
             "int": lambda r: int(r.shape[0]), "arith": lambda r: r.shape[0] * 2,
             "numpy": lambda r: r.numpy()}

    @xla_trace
    def f(x):
        r = x[x > 0]
        reads[read](r)
        return r.sum()

    with pytest.raises(ValueReadError, match="test_ragged.py"):
        f(eg.tensor(np.arange(-3.0, 5.0, dtype=np.float32)))


@pytest.mark.parametrize("name", sorted(set(PROGRAMS) - set(REGION_SAFE)))
def test_ops_that_need_the_exact_size_are_refused_in_regions(name):
    data = inputs(N, D, MASKS[3], 0)

    @xla_trace
    def f(x, w, m, lab):
        return PROGRAMS[name](x, w, m, lab)[0]

    with pytest.raises(ValueReadError, match="exact size|data-dependent"):
        f(*(eg.tensor(data[k]) for k in ("x", "w", "m", "lab")))


def test_graph_breaks_read_the_size_and_go_on_eagerly():
    @partial_trace(graph_breaks=True)
    def f(x):
        r = x[x > 0]
        return r.sum() * len(r)

    x = np.arange(-3.0, 5.0, dtype=np.float32)
    assert f(eg.tensor(x)).item() == pytest.approx(x[x > 0].sum() * 4)


def test_selections_by_different_masks_cannot_be_combined_in_a_region():
    @xla_trace
    def f(x):
        return (x[x > 0] + x[x < 3]).sum()

    with pytest.raises(ValueReadError, match="two different data-dependent"):
        f(eg.tensor(np.arange(-3.0, 5.0, dtype=np.float32)))


def test_nonzero_and_cond_take_in_a_region():
    @xla_trace
    def f(x):
        v, i = F.cond_take(x > 1, x)
        rows = F.nonzero(x > 2)
        return v.sum() + i.astype("float32").sum() + rows.astype("float32").sum()

    x = np.arange(-3.0, 5.0, dtype=np.float32).reshape(2, 4)
    want = x[x > 1].sum() + np.flatnonzero(x > 1).sum() + np.argwhere(x > 2).sum()
    assert f(eg.tensor(x)).item() == pytest.approx(want)


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree
@pytest.mark.slow
@pytest.mark.parametrize("count", [0, 1, N])
def test_counts_at_the_edges(count):
    """No selected row, one, and all of them: the region (fixed capacity N) equals eager code
    (capacities 0, 1 and N); the mean over no row is NaN in both, its gradient zero."""
    names = ["elementwise", "sum mean", "losses", "rows"]
    data = inputs(N, D, np.arange(N) < count, 0)
    want, gx, gw = _eager_reference(data, names)
    x, w = eg.Parameter(data["x"]), eg.Parameter(data["w"])
    gm = GradManager().attach([x, w])

    @xla_trace
    def step(m, lab):
        with gm:
            losses, dense = _all_programs(x, w, m, lab, names)
            gm.backward(sum(losses[1:], losses[0]))
        return losses + dense

    got = [t.numpy() for t in step(eg.tensor(data["m"]), eg.tensor(data["lab"]))]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-5, atol=1e-6)


@pytest.fixture
def ladder():
    """Selections at the ladder's capacities, their counts read on the host (as from a
    source larger than `small_source`)."""
    eg.set_ragged_buckets(2.0, small_source=0)
    yield
    eg.set_ragged_buckets(2.0)


def test_ops_after_a_concatenation_of_selections_compile_per_its_size_not_per_split(ladder):
    """A concatenation of two selections, then a layer: with graph breaks, the layer's stretch
    compiles once for the concatenation's capacity (16), however the rows split between the
    parts (capacities 4 + 16, then 16 + 4), as in eager code; the values equal eager's."""
    w = eg.Parameter(np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4))

    def head(x):
        both = F.concat([x[x[:, 0] > 0], x[x[:, 1] > 0]])
        return (F.relu(F.matmul(both, w)) ** 2).sum()

    traced = partial_trace(head, graph_breaks=True)
    rows = np.arange(1.0, 13.0, dtype=np.float32)[:, None]
    for first, second in ((3, 9), (9, 3)):
        x = np.concatenate([rows, rows, rows], axis=1)
        x[first:, 0] *= -1
        x[second:, 1] *= -1
        gm = GradManager().attach([w])
        with gm:
            got = traced(eg.tensor(x))
            gm.backward(got)
        grad, w.grad = w.grad.numpy(), None
        with gm:
            want = head(eg.tensor(x))
            gm.backward(want)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        np.testing.assert_allclose(grad, w.grad.numpy(), rtol=1e-6)
        w.grad = None
    report = traced.explain()
    assert "ragged_concat (its output is sized from its inputs' lengths)" in report
    assert "4 ops (cached), then the end of the region" in report, report
