"""A region's executables kept by its captured jaxpr (`xla_segments/segment_store.py`) and a segment
that consults a store before tracing (`xla_segments.Segment(store=...)`): what a jaxpr's text
cannot say is never keyed by it, and a loaded segment computes what a compiled one does."""

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eager as eg
import partial
import xla_segments
from eager.autodiff import GradManager
from eager.core.ops import lean_grads
from partial.compiled import entry as partial_entry
from xla_segments import CompileOptions, Segment, segment_store
from xla_segments.segment_store import SegmentStore, describe

X = jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32).reshape(2, 3)


def described(fn, *args):
    closed = jax.make_jaxpr(fn)(*args)
    return describe(closed.jaxpr, [(None, c) for c in closed.consts], len(args))


def _user_vjp(scale):
    @jax.custom_vjp
    def f(x):
        return x * 2

    f.defvjp(lambda x: (x * 2, None), lambda _, g: (g * scale,))
    return f


def test_a_user_functions_hidden_in_the_jaxpr_is_never_keyed_by_its_text():
    # the printed jaxprs of both are the same; their gradients differ
    assert str(jax.make_jaxpr(_user_vjp(2.0))(X)) == str(jax.make_jaxpr(_user_vjp(3.0))(X))
    assert described(_user_vjp(2.0), X) is None
    callback = jax.ShapeDtypeStruct(X.shape, X.dtype)
    assert described(lambda x: jax.pure_callback(np.sin, callback, x), X) is None


def test_rules_of_jax_and_of_eager_are_keyed_by_name():
    for fn in (jax.nn.relu, jax.nn.gelu, lean_grads.gelu, lambda x: jnp.tanh(x @ x.T)):
        text = described(fn, X)
        assert text is not None and text == described(fn, X)
    assert "eager.core.ops.lean_grads" in described(lean_grads.gelu, X)


def test_baked_constants_are_keyed_by_value():
    a, b = np.arange(6.0, dtype="float32").reshape(2, 3), np.ones((2, 3), "float32")
    assert described(lambda x: x + a, X) != described(lambda x: x + b, X)
    assert described(lambda x: x + a, X) == described(lambda x: x + a.copy(), X)


class DictStore:
    tag = "_v7"

    def __init__(self):
        self.kept, self.loads = {}, 0

    def load(self, text):
        self.loads += text in self.kept
        return self.kept.get(text)

    def save(self, text, compiled, xla_options):
        self.kept[text] = (compiled, xla_options)


def test_a_segment_loads_its_executables_without_tracing_and_computes_the_same():
    calls = []

    def fn(x, w):
        calls.append(1)
        return (jnp.tanh(x @ w), x.sum() * w[0, 0])

    w = jnp.ones((3, 4)) * 0.5
    store = DictStore()
    built = Segment(fn, [X, w], store=store)
    outs = built.forward()(X, w)
    fwd, bwd = built.vjp(wrt=(1,), diff_outputs=(0, 1))
    res_outs, res = fwd(X, w)
    grads = bwd(res, (jnp.ones((2, 4)), jnp.float32(1.0)))
    assert len(store.kept) == 3 and calls
    calls.clear()

    loaded = Segment(fn, [X, w], store=store)
    np.testing.assert_array_equal(loaded.forward()(X, w)[0], outs[0])
    fwd2, bwd2 = loaded.vjp(wrt=(1,), diff_outputs=(0, 1))
    outs2, res2 = fwd2(X, w)
    np.testing.assert_array_equal(outs2[1], res_outs[1])
    np.testing.assert_array_equal(bwd2(res2, (jnp.ones((2, 4)), jnp.float32(1.0)))[0], grads[0])
    assert calls == [] and store.loads == 3  # nothing traced
    assert "tanh" in loaded.forward().as_text()  # lowered again only when asked
    # the store's tag is in the programs' names: jax's own cache keys them by it
    assert "_forward_v7" in built.forward().as_text()
    assert loaded.forward().compiler_options == built.forward().compiler_options


class ThreadStore(DictStore):
    """Reads backwards on a thread of its own that waits for `release`."""

    def __init__(self):
        super().__init__()
        self.release, self.later = threading.Event(), 0

    def load_later(self, text):
        if text not in self.kept:
            return None
        self.later += 1
        pool = ThreadPoolExecutor(1)
        reading = pool.submit(lambda: self.release.wait() and self.kept[text])
        pool.shutdown(wait=False)
        return reading.result


def _train_segment(store, fn, w):
    fwd, bwd = Segment(fn, [X, w], store=store).vjp(wrt=(1,), diff_outputs=(0,))
    outs, res = fwd(X, w)
    return bwd, res, outs


def test_a_backward_is_read_while_the_step_goes_on_and_waited_for_when_it_runs():
    calls = []

    def fn(x, w):
        calls.append(1)
        return (jnp.tanh(x @ w),)

    w = jnp.ones((3, 4)) * 0.5
    store = ThreadStore()
    bwd, res, outs = _train_segment(store, fn, w)
    want = bwd(res, (jnp.ones((2, 4)),))
    calls.clear()
    bwd, res, outs = _train_segment(store, fn, w)  # forward loaded, backward still being read
    assert store.later == 1 and not store.release.is_set()
    store.release.set()
    np.testing.assert_array_equal(bwd(res, (jnp.ones((2, 4)),))[0], want[0])
    assert calls == []  # nothing traced


def test_a_backward_that_cannot_be_read_is_compiled_again():
    w = jnp.ones((3, 4)) * 0.5
    store = ThreadStore()
    bwd, res, _ = _train_segment(store, lambda x, w: (jnp.tanh(x @ w),), w)
    want = bwd(res, (jnp.ones((2, 4)),))
    store.release.set()
    store.load_later = lambda text: (lambda: None)  # found, then unreadable (damaged)
    bwd, res, _ = _train_segment(store, lambda x, w: (jnp.tanh(x @ w),), w)
    np.testing.assert_array_equal(bwd(res, (jnp.ones((2, 4)),))[0], want[0])
    assert bwd.seconds > 0


def test_a_forked_child_reads_on_a_reader_thread_of_its_own():
    """The reader pool's thread is not copied by a fork: a child that reused the parent's pool
    would wait forever for its first read."""
    import multiprocessing

    segment_store._reader().submit(int).result()  # the parent's pool exists, its thread runs
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_read_in_child)
    with warnings.catch_warnings():  # jax warns of fork; the child runs no jax
        warnings.simplefilter("ignore", RuntimeWarning)
        child.start()
    child.join(timeout=30)
    assert child.exitcode == 0


def _read_in_child():
    raise SystemExit(0 if segment_store._reader().submit(int).result(timeout=10) == 0 else 1)


def test_other_inputs_or_options_are_other_executables():
    store = DictStore()
    Segment(lambda x: (x * 2,), [X], store=store).forward()
    Segment(lambda x: (x * 2,), [X[:1]], store=store).forward()
    Segment(lambda x: (x * 2,), [X], store=store, options=CompileOptions(donate=(0,))).forward()
    assert store.loads == 0 and len(store.kept) == 3


def stores_made(monkeypatch, region, *args):
    made = []
    real = segment_store.for_program
    monkeypatch.setattr(partial_entry, "store_for_program",
                        lambda p: made.append(real(p)) or made[-1])
    with GradManager().attach(list(args)) as gm:
        gm.backward(region(*args).sum())
    return made


@pytest.fixture
def cache_dir(tmp_path):
    """`tmp_path` as the cache while the test runs; the session's cache afterwards."""
    before = xla_segments.cache_dir()
    partial.set_cache_dir(tmp_path)
    yield tmp_path
    partial.set_cache_dir(before)


def test_a_region_gets_a_store_only_with_the_cache_on(cache_dir, monkeypatch):
    x = eg.Parameter(np.asarray(X))
    made = stores_made(monkeypatch, partial.partial_trace(lambda t: t * 3 * t), x)
    assert [type(m) for m in made] == [SegmentStore]
    assert len(list((cache_dir / "segments").iterdir())) == 2  # training forward, backward
    partial.set_cache_dir(None)
    assert stores_made(monkeypatch, partial.partial_trace(lambda t: t * 3 * t), x) == [None]


def test_a_regions_forward_does_not_wait_for_its_backward_being_read(cache_dir, monkeypatch):
    """A new process's region loads its training forward and leaves the backward to the reader
    thread until the backward runs (with one device nothing asks the backward for its layouts
    before: asking made the forward wait for the read)."""
    x = eg.Parameter(np.asarray(X))
    with GradManager().attach([x]) as gm:  # fills the cache
        gm.backward(partial.partial_trace(lambda t: (t * 3 * t).sum())(x))
    want = x.grad.numpy()
    released, waited = threading.Event(), []
    real = SegmentStore.load_later

    def later(self, text):
        wait = real(self, text)
        if wait is None:
            return None

        def noted():
            waited.append(released.is_set())
            return wait()
        return noted

    monkeypatch.setattr(SegmentStore, "load_later", later)
    x.grad = None
    with GradManager().attach([x]) as gm:
        # another function of the same computation: a cache of its own, the executables on disk
        loss = partial.partial_trace(lambda t: (t * 3 * t).sum())(x)
        released.set()
        gm.backward(loss)
    assert waited == [True]
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_a_region_with_a_users_gradient_rule_is_not_stored(cache_dir, monkeypatch):
    """An op whose jax function has its own `custom_vjp`: the jaxpr's text does not show the
    rule, so the region compiles as it would with the cache off (a stale rule is never run)."""
    op = eg.Op("scaled_by_five", _user_vjp(5.0))
    x = eg.Parameter(np.asarray(X))
    made = stores_made(monkeypatch, partial.partial_trace(lambda t: eg.apply(op, t)), x)
    assert made == [None] and not (cache_dir / "segments").exists()
    np.testing.assert_allclose(x.grad.numpy(), np.full(X.shape, 5.0))


def test_a_stretch_is_kept_by_its_records_unless_an_op_is_user_code(cache_dir):
    """A lazily recorded stretch (`partial/lazy/stretch.py`) is described by its records: the
    ops' names, attributes (`...` and slices included) and inputs; an op whose function is the
    user's, or two ops of one name, keep it out."""
    getitem = eg.OPS["getitem"]
    spec = (("spec", (Ellipsis, ("slice", None, 2, None))),)
    records = [(getitem, spec, ((1, 0),), False)]
    layout = ((1,), [True], (0,), True)
    kept = segment_store.for_stretch(records, layout)
    assert isinstance(kept, SegmentStore) and "getitem" in kept.description
    other = (("spec", (Ellipsis, ("slice", None, 3, None))),)
    assert segment_store.for_stretch([(getitem, other, ((1, 0),), False)],
                                     layout).description != kept.description
    user = eg.Op("scaled_by_five", lambda x: x * 5)
    assert segment_store.for_stretch([(user, (), ((1, 0),), False)], layout) is None
    twin = eg.Op("getitem", getitem.fwd)
    assert segment_store.for_stretch(records + [(twin, spec, ((1, 0),), False)],
                                     ((1, 1), [True, True], (1,), True)) is None
