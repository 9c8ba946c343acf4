"""`Segment`: compiled forward, vjp forward and backward agree with jax, and describe
themselves; `CompileOptions` reach jax and XLA."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tests.helpers import examples
from xla_segments import CompileOptions, PerRank, Segment, base_compile_options


def _fn(x, w, idx):
    h = jnp.tanh(x @ w)
    return h.sum(0), jnp.argmax(h, axis=1), h * idx[:, None]


def _inputs():
    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
            jnp.asarray(rng.standard_normal((3, 5)), jnp.float32),
            jnp.arange(4, dtype=jnp.float32))


def test_forward_matches_the_function():
    args = _inputs()
    seg = Segment(_fn, args, name="f")
    for got, want in zip(seg.forward()(*args), _fn(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("wrt, diff_outputs", [((0, 1), (0, 2)), ((1,), (0,)), ((0,), (2,))])
def test_vjp_matches_jax_vjp(wrt, diff_outputs):
    args = _inputs()
    seg = Segment(_fn, args)
    fwd, bwd = seg.vjp(wrt, diff_outputs)
    outs, residuals = fwd(*args)
    for got, want in zip(outs, _fn(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    cts = tuple(jnp.ones_like(outs[j]) * (j + 1) for j in diff_outputs)
    grads = bwd(residuals, cts)

    def selected(*d):
        full = list(args)
        for i, v in zip(wrt, d):
            full[i] = v
        outs = _fn(*full)
        return tuple(outs[j] for j in diff_outputs)

    _, pullback = jax.vjp(selected, *(args[i] for i in wrt))
    for got, want in zip(grads, pullback(cts)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_executables_are_built_once_and_describe_themselves():
    args = _inputs()
    seg = Segment(_fn, args, name="layer")
    assert seg.compile_seconds == 0 and seg.executables() == {}
    fwd = seg.forward()
    assert seg.forward() is fwd
    pair = seg.vjp((1,), (0,))
    assert seg.vjp((1,), (0,)) is pair
    assert len(seg.executables()) == 3 and seg.compile_seconds > 0
    assert "layer_forward" in fwd.as_text() and "HloModule" in fwd.as_text(optimized=True)
    assert fwd.cost_analysis() is not None
    mem = fwd.memory_analysis()
    assert mem is None or mem.argument_size_in_bytes > 0


def test_donated_inputs_are_consumed():
    x = jnp.ones((4,))
    seg = Segment(lambda a, b: (a + b,), [x, x], options=CompileOptions(donate=(0,)))
    a, b = jnp.ones((4,)), jnp.ones((4,))
    (out,) = seg.forward()(a, b)
    np.testing.assert_array_equal(out, 2.0)
    assert a.is_deleted() and not b.is_deleted()


def test_wrong_argument_types_are_refused_before_running():
    args = _inputs()
    seg = Segment(_fn, args)
    with pytest.raises(TypeError, match="Argument types differ"):
        seg.forward()(args[0][:2], args[1], args[2])


# --- CompileOptions ------------------------------------------------------------------------

_option_names = st.sampled_from(["xla_a", "xla_b", "xla_c", "xla_d"])
_option_values = st.one_of(st.booleans(), st.integers(-5, 5), st.text("xyz", max_size=3))


@settings(examples(50), derandomize=False)  # cheap (no compiling): a new draw every run
@given(st.dictionaries(_option_names, _option_values), st.lists(st.integers(0, 5)),
       st.randoms(use_true_random=False))
def test_options_are_values_whatever_the_order_they_are_written_in(options, donate, random):
    # Options are cache keys: two spellings of the same options must be one key.
    items = list(options.items())
    random.shuffle(items)
    shuffled_donate = list(donate)
    random.shuffle(shuffled_donate)
    a = CompileOptions(donate=tuple(donate), compiler_options=options,
                       executable_options={"backward": options})
    b = CompileOptions(donate=shuffled_donate, compiler_options=tuple(items),
                       executable_options=(("backward", tuple(items)),))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a.donate == tuple(sorted(set(donate)))
    assert a.for_kind("backward") == {**base_compile_options(), **options} == a.for_kind("forward")


def test_options_are_frozen_and_copied_with_changes():
    opts = CompileOptions(donate=(1,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.remat = True
    changed = opts.with_(remat="dots")
    assert changed.remat == "dots" and changed.donate == (1,) and opts.remat is False
    assert changed != opts and changed == dataclasses.replace(opts, remat="dots")
    with pytest.raises(ValueError, match="remat"):
        opts.with_(remat="everything")  # with_ validates like the constructor


@pytest.mark.parametrize("changes, error, match", [
    ({"remat": "all"}, ValueError, "remat: unknown value 'all'"),
    ({"remat": 1}, TypeError, "remat must be a bool or 'dots'"),
    ({"donate": (0, -1)}, ValueError, "donate: input index -1 is negative"),
    ({"donate": (0.5,)}, TypeError, "donate must hold int"),
    ({"donate": (True,)}, TypeError, "donate must hold int"),
    ({"executable_options": {"vjp": {}}}, ValueError, "unknown executable kind 'vjp'"),
    ({"executable_options": (("backward",),)}, TypeError, "not a \\(kind, options\\) pair"),
    ({"compiler_options": {"xla_x": None}}, TypeError, "compiler_options: option 'xla_x'"),
    ({"compiler_options": (("xla_x", 1), ("xla_x", 2))}, ValueError, "given twice"),
    ({"compiler_options": 3}, TypeError, "compiler_options must be"),
    ({"executable_options": {"forward": {"xla_x": [1]}}}, TypeError,
     "executable_options\\['forward'\\]: option 'xla_x'"),
    ({"in_shardings": "replicated"}, TypeError, "in_shardings must be None or a tuple"),
    ({"out_shardings": {"a": 1}}, TypeError, "out_shardings must be hashable"),
])
def test_invalid_options_are_refused_naming_the_field(changes, error, match):
    with pytest.raises(error, match=match):
        CompileOptions(**changes)


def test_options_that_do_not_fit_the_segment_are_refused():
    x = jnp.ones((4,))
    with pytest.raises(ValueError, match="donate has input indices \\[2\\].*2 inputs"):
        Segment(lambda a, b: (a + b,), [x, x], options=CompileOptions(donate=(2,)))
    with pytest.raises(ValueError, match="in_shardings has 1 entries for 2 inputs"):
        Segment(lambda a, b: (a + b,), [x, x],
                options=CompileOptions(in_shardings=(x.sharding,)))
    with pytest.raises(TypeError, match="options must be a CompileOptions"):
        Segment(lambda a, b: (a + b,), [x, x], options={"donate": (0,)})


def test_shardings_reach_the_inference_forward():
    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    replicated = NamedSharding(mesh, PartitionSpec())
    x = jnp.ones((4,))
    seg = Segment(lambda a, b: (a + b, a * b), [x, x], options=CompileOptions(
        in_shardings=(replicated, replicated), out_shardings=(replicated, replicated)))
    fwd = seg.forward()
    assert fwd.compiled.input_shardings[0] == (replicated, replicated)
    outs = fwd(x, 2 * x)
    assert [o.sharding for o in outs] == [replicated, replicated]
    np.testing.assert_array_equal(outs[1], 2.0)


def _entry_instructions(exe):
    """Instructions in the entry computation of the optimized HLO: 2 (parameter and one fused
    root) for a fully fused elementwise function, more when fusion is off."""
    text = exe.as_text(optimized=True)
    entry = text[text.index("\nENTRY"):]
    return entry[:entry.index("\n}")].count(" = ")


def _elementwise(x):
    return (jnp.tanh(x) * 2.0 + 1.0,)


def test_compiler_options_reach_xla():
    x = jnp.linspace(-2.0, 2.0, 8)
    plain = Segment(_elementwise, [x]).forward()
    unfused = Segment(_elementwise, [x], options=CompileOptions(
        compiler_options={"xla_disable_hlo_passes": "fusion"})).forward()
    assert unfused.compiler_options == {**base_compile_options(),
                                        "xla_disable_hlo_passes": "fusion"}
    assert _entry_instructions(unfused) > _entry_instructions(plain)
    np.testing.assert_allclose(unfused(x)[0], plain(x)[0], rtol=1e-6)


@pytest.mark.parametrize("options, message", [
    ({"xla_no_such_option": True}, "No such compile option: 'xla_no_such_option'"),
    ({"xla_cpu_enable_fast_math": "yes"}, "'yes' is not a valid bool value"),
])
def test_options_xla_does_not_know_fail_at_compile_naming_them(options, message):
    seg = Segment(_elementwise, [jnp.ones((8,))],
                  options=CompileOptions(compiler_options=options))
    with pytest.raises(Exception, match=message):
        seg.forward()


def test_executable_options_apply_to_their_kind_only():
    # Fusion off everywhere but in the training forward, which turns it back on.
    x = jnp.linspace(-2.0, 2.0, 8)
    plain = Segment(_elementwise, [x])
    seg = Segment(_elementwise, [x], options=CompileOptions(
        compiler_options={"xla_disable_hlo_passes": "fusion"},
        executable_options={"forward_vjp": {"xla_disable_hlo_passes": ""}}))
    (plain_fwd, plain_bwd), (fwd, bwd) = plain.vjp((0,), (0,)), seg.vjp((0,), (0,))
    assert fwd.compiler_options == {**base_compile_options(), "xla_disable_hlo_passes": ""}
    assert _entry_instructions(fwd) == _entry_instructions(plain_fwd)
    assert _entry_instructions(bwd) > _entry_instructions(plain_bwd)
    assert _entry_instructions(seg.forward()) > _entry_instructions(plain.forward())


def _mlp(x, w1, b1, w2, b2, w3, b3):
    h = jnp.tanh(x @ w1 + b1)
    h = jnp.tanh(h @ w2 + b2)
    out = jnp.tanh(h @ w3 + b3)
    return out.sum(), out


def _mlp_inputs():
    rng = np.random.default_rng(1)
    shapes = [(32, 16), (16, 64), (64,), (64, 64), (64,), (64, 8), (8,)]
    return [jnp.asarray(rng.standard_normal(s) / np.sqrt(s[0]), jnp.float32) for s in shapes]


_PARAMS = (1, 2, 3, 4, 5, 6)


def _train(seg, args):
    fwd, bwd = seg.vjp(_PARAMS, (0,))
    outs, residuals = fwd(*args)
    return outs, bwd(residuals, (jnp.float32(1.0),))


# slow set: the README's command ran 11:14 in a fresh-clone CI run of this stop's tree
@pytest.mark.slow
def test_remat_keeps_values_and_gradients_and_shrinks_residuals():
    args = _mlp_inputs()
    plain = Segment(_mlp, args)
    want_outs, want_grads = _train(plain, args)
    jax_grads = jax.grad(lambda *p: _mlp(args[0], *p)[0], argnums=range(6))(*args[1:])
    for got, want in zip(want_grads, jax_grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    sizes = {False: plain.residual_bytes(_PARAMS, (0,))}
    for remat in (True, "dots"):
        seg = Segment(_mlp, args, options=CompileOptions(remat=remat))
        outs, grads = _train(seg, args)
        for got, want in zip(outs + grads, want_outs + want_grads):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        sizes[remat] = seg.residual_bytes(_PARAMS, (0,))
        # The backward recomputes the activations it no longer receives.
        assert "tanh" in seg.vjp(_PARAMS, (0,))[1].as_text()
    assert "tanh" not in plain.vjp(_PARAMS, (0,))[1].as_text()
    # Without remat: the three layers' activations; with it, only the inputs (x, parameters);
    # "dots": the inputs and the matmul outputs.
    assert sizes[True] < sizes["dots"] < sizes[False]


def test_remat_does_not_change_the_inference_forward():
    args = _mlp_inputs()
    plain = Segment(_mlp, args).forward()
    remat = Segment(_mlp, args, options=CompileOptions(remat=True)).forward()
    assert remat.as_text() == plain.as_text()


# ----- per-rank segments -------------------------------------------------------------------
def _per_rank() -> PerRank:
    return PerRank(Mesh(np.array(jax.devices()[:1]), ("rank",)), "rank")


def _collective_fn(x, s):
    y = lax.psum(x * s, "rank")
    return y, (y * y).sum(), lax.axis_index("rank")


def _local_reference(x, s):
    """What `_collective_fn` computes on one rank alone (the axis has size 1)."""
    y = x * s
    return y, (y * y).sum(), jnp.int32(0)


def test_a_per_rank_segment_takes_and_returns_local_arrays_scalars_included():
    x, s = jnp.arange(6.0).reshape(2, 3), jnp.float32(1.5)
    seg = Segment(_collective_fn, [x, s], options=CompileOptions(per_rank=_per_rank()))
    got = seg.forward()(x, s)
    for g, w in zip(got, _local_reference(x, s)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_per_rank_segment_differentiates_like_the_local_function():
    x, s = jnp.arange(6.0).reshape(2, 3), jnp.float32(1.5)
    seg = Segment(_collective_fn, [x, s], options=CompileOptions(per_rank=_per_rank()))
    fwd, bwd = seg.vjp(wrt=(0, 1), diff_outputs=(0, 1))
    outs, res = fwd(x, s)
    cts = (jnp.ones((2, 3)), jnp.float32(2.0))
    got = bwd(res, cts)
    _, pullback = jax.vjp(lambda a, b: _local_reference(a, b)[:2], x, s)
    for g, w in zip(got, pullback(cts)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_per_rank_segment_refuses_donation_and_bad_options():
    with pytest.raises(ValueError, match="per-rank segment does not donate"):
        Segment(_collective_fn, [jnp.ones(2), jnp.float32(1)],
                options=CompileOptions(per_rank=_per_rank(), donate=(0,)))
    with pytest.raises(TypeError, match="per_rank must be None or a PerRank"):
        CompileOptions(per_rank="rank")


def test_the_training_forward_keeps_only_the_residuals_the_backward_reads():
    """jax's vjp of a normalization keeps a value its transpose never reads; the segment's
    forward does not return it, and gradients are jax's."""
    def norm(x, w):
        return ((x - x.mean(0)) / jnp.sqrt(x.var(0) + 1e-5) * w,)

    x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 4)), jnp.float32)
    w = jnp.arange(1.0, 5.0)
    seg = Segment(norm, [x, w])
    _, pullback = jax.vjp(norm, x, w)
    everything = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(pullback))
    assert seg.residual_bytes((0, 1), (0,)) < everything
    fwd, bwd = seg.vjp((0, 1), (0,))
    outs, residuals = fwd(x, w)
    ct = jnp.ones((8, 4))
    got = bwd(residuals, (ct,))
    want = pullback((ct,))
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
