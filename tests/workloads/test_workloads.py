"""The benchmark workloads (mlp, cnn, gpt): the eager models carry the spec's parameter names and
counts, and a few eager training steps match the pure-jax jitted reference step by step (losses)
and at the end (parameters, BatchNorm running statistics).

Tolerances. Losses agree to float32 round-off. Parameters do too for the mlp; for the cnn a ReLU
input within round-off of zero can flip its mask between two float32 implementations, which moves
every gradient below it by about 1e-4 relative, and for the gpt Adam normalizes gradients that are
mathematically zero (the key bias: softmax ignores a per-row shift) and so amplifies their
round-off. The absolute tolerances below stay two orders of magnitude under the parameter updates.
"""

import math

import jax
import numpy as np
import pytest

from benchmarks.compiles import count_compiles
from benchmarks.workloads import (
    DYNAMIC,
    NUM_BUFFER_FLOATS,
    NUM_PARAMS,
    VARIANTS,
    WORKLOADS,
    build_model,
    eager_step,
    init_params,
    is_buffer,
    jax_jit_step,
    make_batch,
    variants_for,
)

STEPS = {"mlp": 5, "cnn": 3, "gpt": 3}
PARAM_ATOL = {"mlp": 1e-6, "cnn": 2e-5, "gpt": 5e-5}
UPDATE_RTOL = {"mlp": 1e-4, "cnn": 2e-2, "gpt": 2e-2}


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOADS)
def test_eager_model_has_the_spec_names_and_counts(name):
    model = build_model(name)
    state = init_params(name)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    assert sorted(params) == sorted(k for k in state if not is_buffer(k))
    assert sorted(buffers) == sorted(k for k in state if is_buffer(k))
    assert sum(p.size for p in params.values()) == NUM_PARAMS[name]
    assert sum(b.size for b in buffers.values()) == NUM_BUFFER_FLOATS[name]
    assert all(model.state_dict()[k].dtype == np.float32 for k in state)
    assert set(model.state_dict()) == set(state)
    assert all(k.startswith(("backbone.", "head.")) for k in state)


def test_init_and_data_are_deterministic_and_follow_the_recipes():
    a, b = init_params("mlp"), init_params("mlp")
    assert all(np.array_equal(a[k], b[k]) for k in a)
    bound = 1 / math.sqrt(784)
    assert np.abs(a["backbone.fc1.weight"]).max() <= bound
    assert a["backbone.fc1.weight"].shape == (512, 784)
    gpt = init_params("gpt")
    assert abs(gpt["backbone.blocks.0.mlp.fc.weight"].std() - 0.02) < 1e-3
    assert not gpt["head.bias"].any() and (gpt["backbone.ln_f.weight"] == 1).all()
    cnn = init_params("cnn")
    assert (cnn["backbone.stem.bn.running_var"] == 1).all()
    assert cnn["backbone.layer2.0.shortcut.conv.weight"].shape == (64, 32, 1, 1)
    x, y = make_batch("gpt")
    assert x.shape == y.shape == (16, 64) and np.array_equal(x[:, 1:], y[:, :-1])
    x, y = make_batch("cnn")
    assert x.shape == (64, 3, 32, 32) and x.dtype == np.float32 and 0 <= y.min() <= y.max() < 10


def _train(runner, steps):
    losses = [runner.step() for _ in range(steps)]
    runner.sync(losses[-1])
    return [runner.float_loss(loss) for loss in losses], runner.state_dict()


@pytest.mark.slow  # trains each workload in both frameworks: .ci/run runs it after the rest
@pytest.mark.parametrize("name", WORKLOADS)
def test_eager_training_matches_the_jax_reference(name):
    steps = STEPS[name]
    with jax.default_matmul_precision("highest"):  # no TF32 on GPUs; a no-op on CPU
        eager_losses, eager_state = _train(eager_step(name), steps)
        ref_losses, ref_state = _train(jax_jit_step(name), steps)

    expected = math.log(256 if name == "gpt" else 10)
    assert abs(eager_losses[0] - expected) < 0.1
    assert all(b < a for a, b in zip(eager_losses, eager_losses[1:]))
    np.testing.assert_allclose(eager_losses, ref_losses, rtol=1e-4)

    init = init_params(name)
    assert set(eager_state) == set(ref_state) == set(init)
    for k, ref in ref_state.items():
        np.testing.assert_allclose(eager_state[k], ref, rtol=1e-4, atol=PARAM_ATOL[name],
                                   err_msg=k)
        moved = ref - init[k]
        assert np.linalg.norm(moved) > 0, k
        err = np.linalg.norm(eager_state[k] - ref) / np.linalg.norm(moved)
        assert err < UPDATE_RTOL[name], (k, err)


def _hard_example_count(state: dict, x: np.ndarray, y: np.ndarray) -> int:
    """The dynamic head's count for a state dict, in float64 numpy: the samples whose
    cross-entropy is at or above the batch mean."""
    def linear(name, h):
        return h @ state[f"{name}.weight"].T.astype(np.float64) + state[f"{name}.bias"]
    h = np.maximum(linear("backbone.fc1", x.astype(np.float64)), 0)
    logits = linear("head", np.maximum(linear("backbone.fc2", h), 0))
    z = logits - logits.max(axis=1, keepdims=True)
    per_sample = np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]
    return int((per_sample >= per_sample.mean()).sum())


def test_dynamic_head_count_changes_every_step_without_compiles():
    runner = eager_step(DYNAMIC)
    x, y = make_batch(DYNAMIC)
    counts = []
    for _ in range(12):  # the first steps see both capacity buckets (counts 47..73 of 128)
        counts.append(_hard_example_count(runner.state_dict(), x, y))
        runner.sync(runner.step())
    changes = sum(a != b for a, b in zip(counts, counts[1:]))
    assert changes >= 9 and len(set(counts)) >= 6, counts
    assert min(counts) <= 64 < max(counts), counts
    with count_compiles() as seen:  # the ragged selection compiles per bucket, not per count
        for _ in range(10):
            runner.sync(runner.step())
    assert seen.count == 0, seen.names


@pytest.mark.slow  # every variant of the dynamic workload, torch's too: ~13 s
def test_dynamic_variants_agree():
    """Every variant of the dynamic workload (selection in eager code, masked computation in
    `xla_trace` and in pure jax) trains the same: losses and final parameters."""
    assert set(variants_for(DYNAMIC)) >= {"eager", "partial", "xla", "jax_jit_step",
                                          "jax_split"}
    with jax.default_matmul_precision("highest"):
        results = {v: _train(VARIANTS[v](DYNAMIC), 4) for v in variants_for(DYNAMIC)
                   if v != "jax_eager"}  # jax_eager: the same loss function, op by op (slow)
    ref_losses, ref_state = results["jax_jit_step"]
    assert all(b < a for a, b in zip(ref_losses, ref_losses[1:]))
    for variant, (losses, state) in results.items():
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, err_msg=variant)
        for k, ref in ref_state.items():
            np.testing.assert_allclose(state[k], ref, rtol=1e-4, atol=PARAM_ATOL["mlp"],
                                       err_msg=f"{variant} {k}")
