"""The image ops (conv3d, pixel_shuffle, local_response_norm), the CTC loss, and the functions
composed of existing ops (instance_norm, adaptive_max_pool2d): each value against an independent
reference (convolution by patches, pixel shuffle by index arithmetic, the CTC loss by summing
over every alignment and by a numpy forward algorithm) and each gradient against finite
differences of that reference in float64; the slow set also checks full vjps against
`jax.vjp` of the references (`check_op`). Then the errors bad arguments raise.

The references (here and in `references.py`) take numpy or jax arrays (`array_namespace`): numpy
ones need no compiling, which keeps the fast set fast.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import eager as eg
import eager.functional as F
from eager.autodiff import GradManager
from tests.helpers import examples, normal

from .op_check import assert_close, check_fn, check_op
from .references import (
    array_namespace,
    conv3d_ref,
    instance_norm_ref,
    lrn_ref,
    pixel_shuffle_ref,
)

FAST = examples(4)
COVERED = {"conv3d", "pixel_shuffle", "local_response_norm", "ctc_loss"}


# ----- conv3d -------------------------------------------------------------------------------------
CONV3D = [((2, 1, 1), (0, 1, 1), (1, 1, 2), 2, (2, 1, 2)),
          ((1, 2, 1), (1, 0, 1), (2, 1, 1), 1, (2, 3, 2))]


def _conv3d_case(rng, stride, padding, dilation, groups, kernel):
    arrays = [normal(rng, 2, 4, 5, 4, 5), normal(rng, 6, 4 // groups, *kernel), normal(rng, 6)]
    return arrays, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def test_conv3d(rng):
    arrays, attrs = _conv3d_case(rng, *CONV3D[0])
    check_fn(lambda x, w, b: F.conv3d(x, w, b, **attrs),
             lambda x, w, b: conv3d_ref(x, w, b, **attrs), arrays, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("case", CONV3D)
def test_conv3d_vjp(rng, case):
    arrays, attrs = _conv3d_case(rng, *case)
    check_op("conv3d", arrays, lambda x, w, b: conv3d_ref(x, w, b, **attrs), attrs,
             rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_conv3d_takes_megengine_grouped_weights_and_channel_biases(rng):
    x, w, b = normal(rng, 1, 4, 3, 3, 3), normal(rng, 2, 3, 2, 1, 2, 2), normal(rng, 1, 6, 1, 1, 1)
    got = F.conv3d(x, w, b, padding=1, groups=2)
    want = conv3d_ref(x, w.reshape(6, 2, 1, 2, 2), b, (1, 1, 1), (1, 1, 1), (1, 1, 1), 2)
    assert_close(got, want, 1e-4, 1e-4, "conv3d")


# ----- pixel_shuffle and local_response_norm ------------------------------------------------------
def test_pixel_shuffle(rng):
    check_fn(lambda x: F.pixel_shuffle(x, 2), lambda x: pixel_shuffle_ref(x, 2),
             [normal(rng, 2, 8, 2, 3)])


@pytest.mark.slow
@FAST
@given(lead=st.lists(st.integers(1, 2), max_size=2), r=st.integers(1, 3),
       c=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_pixel_shuffle_shapes(lead, r, c, seed):
    x = normal(np.random.default_rng(seed), *lead, c * r * r, 2, 3)
    check_op("pixel_shuffle", [x], lambda x: pixel_shuffle_ref(x, r), {"factor": r})


def test_local_response_norm(rng):
    check_fn(lambda x: F.local_response_norm(x, 3, 2.0, 0.1, 0.75),
             lambda x: lrn_ref(x, 3, 2.0, 0.1, 0.75), [normal(rng, 2, 7, 3, 4, scale=2.0)])


@pytest.mark.slow
@pytest.mark.parametrize("shape, size", [((2, 7, 3, 4), 3), ((2, 4, 5), 9), ((3, 5), 1)])
def test_local_response_norm_vjp(rng, shape, size):
    attrs = dict(size=size, k=2.0, alpha=0.1, beta=0.75)
    check_op("local_response_norm", [normal(rng, *shape, scale=2.0)],
             lambda x: lrn_ref(x, **attrs), attrs, rtol=1e-5, atol=1e-5)


def test_local_response_norm_matches_megengine_docstring_example():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    y = F.local_response_norm(x, kernel_size=3, k=1.0, alpha=1e-4, beta=0.75).numpy()
    np.testing.assert_allclose(y[0, 0, 0], [0.0, 0.999925, 1.9994003, 2.9979765, 3.9952066],
                               rtol=1e-6)


# ----- instance_norm and adaptive_max_pool2d (compositions) ---------------------------------------
def test_instance_norm(rng):
    x, w, b = normal(rng, 2, 3, 4, 5, scale=3.0) + 1, normal(rng, 3), normal(rng, 3)
    check_fn(lambda x, w, b: F.instance_norm(x, True, w, b, eps=1e-3),
             lambda x, w, b: instance_norm_ref(x, w, b, 1e-3), [x, w, b], rtol=1e-4)
    plain = F.instance_norm(x, False).numpy()
    assert_close(plain, instance_norm_ref(x, np.ones(3), np.zeros(3), 1e-5), 1e-4, 1e-5, "plain")


def megengine_bins(n, o):
    """MegEngine's adaptive bins: stride n // o, window n - (o - 1) * stride."""
    s = n // o
    return [(i * s, i * s + n - (o - 1) * s) for i in range(o)]


def adaptive_max_ref(x, oshp):
    rows = [np.stack([x[:, :, a:b, c:d].max(axis=(2, 3))
                      for c, d in megengine_bins(x.shape[3], oshp[1])], axis=-1)
            for a, b in megengine_bins(x.shape[2], oshp[0])]
    return np.stack(rows, axis=-2)


def test_adaptive_max_pool2d(rng):
    x = normal(rng, 2, 3, 7, 5)  # continuous values: no ties
    check_fn(lambda x: F.adaptive_max_pool2d(x, (5, 2)), lambda x: adaptive_max_ref(x, (5, 2)),
             [x])


@pytest.mark.slow
@FAST
@given(oh=st.integers(1, 7), ow=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_adaptive_max_pool2d_sizes(oh, ow, seed):
    x = normal(np.random.default_rng(seed), 2, 3, 7, 5)
    check_fn(lambda x: F.adaptive_max_pool2d(x, (oh, ow)), lambda x: adaptive_max_ref(x, (oh, ow)),
             [x])


# ----- ctc_loss -----------------------------------------------------------------------------------
def _collapse(path, blank):
    out = [p for i, p in enumerate(path) if p != blank and (i == 0 or p != path[i - 1])]
    return tuple(out)


def ctc_brute_ref(pred_lengths, labels, blank, reduction):
    """-log of the summed probability of every path over the frames that collapses to the
    label (repeats merged, then blanks dropped): all C ** T paths enumerated, each path's log
    probability a one-hot contraction with log(pred) over its sample's frames."""
    def ref(pred, *_lengths_and_labels):
        xp, (t_max, n, c) = array_namespace(pred), pred.shape
        paths = [[p for p in itertools.product(range(c), repeat=int(t))
                  if _collapse(p, blank) == tuple(label)]
                 for t, label in zip(pred_lengths, labels)]
        onehot = np.zeros((n, max(map(len, paths)), t_max, c), np.float32)
        for i, (t, these) in enumerate(zip(pred_lengths, paths)):
            onehot[i, :len(these), :int(t)] = np.eye(c, dtype=np.float32)[np.array(these)]
        valid = np.arange(onehot.shape[1])[None, :] < np.array([len(p) for p in paths])[:, None]
        logp = xp.einsum("nptc,tnc->np", onehot, xp.log(pred))
        top = logp.max(axis=1, keepdims=True)
        total = xp.sum(xp.where(valid, xp.exp(logp - top), 0), axis=1)
        loss = -(xp.log(total) + top[:, 0])
        lengths = np.array([len(label) for label in labels], np.float32)
        return {"mean": xp.mean(loss / lengths), "sum": xp.sum(loss), "none": loss}[reduction]
    return ref


def ctc_numpy_ref(pred, pred_lengths, labels, blank):
    """The textbook forward algorithm in probability space, float64, one sample at a time."""
    losses = []
    for n, (t_n, label) in enumerate(zip(pred_lengths, labels)):
        ext = [blank]
        for symbol in label:
            ext += [symbol, blank]
        p = pred[:, n].astype(np.float64)
        alpha = np.zeros(len(ext))
        alpha[:2] = p[0, ext[:2]]
        for t in range(1, t_n):
            prev = alpha.copy()
            for s in range(len(ext)):
                total = prev[s] + (prev[s - 1] if s >= 1 else 0)
                if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                    total += prev[s - 2]
                alpha[s] = total * p[t, ext[s]]
        losses.append(-np.log(alpha[-1] + alpha[-2]))
    return np.array(losses)


def _probs(rng, t, n, c):
    logits = rng.standard_normal((t, n, c))
    return (np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)).astype(np.float32)


CTC = [("mean", 0, False), ("none", 2, True), ("sum", 0, True)]


def _ctc_case(rng, reduction, blank, flat):
    labels = [[1, 3], [3, 3], [1]] if blank == 0 else [[1, 0], [0, 0], [3]]
    lengths = np.array([len(label) for label in labels], np.int32)
    pred_lengths = np.array([5, 4, 3], np.int32)
    if flat:
        label = np.concatenate(labels).astype(np.int32)
    else:
        label = np.array([row + [0] * (2 - len(row)) for row in labels], np.int32)
    arrays = [_probs(rng, 5, 3, 4), pred_lengths, label, lengths]
    return arrays, ctc_brute_ref(pred_lengths, labels, blank, reduction)


def test_ctc_loss_against_every_alignment(rng):
    arrays, ref = _ctc_case(rng, *CTC[0])
    check_fn(lambda *a: F.ctc_loss(*a, blank=0, reduction="mean"), ref, arrays)


@pytest.mark.slow
@pytest.mark.parametrize("reduction, blank, flat", CTC)
def test_ctc_loss_vjp(rng, reduction, blank, flat):
    arrays, ref = _ctc_case(rng, reduction, blank, flat)
    width = 2
    check_op("ctc_loss", arrays, ref, dict(blank=blank, width=width, reduction=reduction),
             rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_ctc_loss_against_the_forward_algorithm(rng):
    t, n, c = 12, 4, 6
    pred, pred_lengths = _probs(rng, t, n, c), np.array([12, 9, 7, 10], np.int32)
    labels = [[1, 2, 2, 5], [3], [4, 4, 1], [5, 1, 2, 3]]
    label = np.zeros((n, 4), np.int32)
    for i, row in enumerate(labels):
        label[i, :len(row)] = row
    lengths = np.array([len(r) for r in labels], np.int32)
    got = F.ctc_loss(pred, pred_lengths, label, lengths, reduction="none").numpy()
    np.testing.assert_allclose(got, ctc_numpy_ref(pred, pred_lengths, labels, 0), rtol=1e-5)
    mean = F.ctc_loss(pred, pred_lengths, label, lengths).numpy()
    np.testing.assert_allclose(mean, np.mean(got / lengths), rtol=1e-6)


@pytest.mark.slow
def test_ctc_loss_of_an_impossible_label_is_large_and_finite(rng):
    """MegEngine floors log-probabilities at log(tiny): no inf loss, no nan gradient."""
    pred = eg.tensor(_probs(rng, 3, 1, 3))
    gm = GradManager().attach([pred])
    with gm:
        loss = F.ctc_loss(pred, np.array([2], np.int32), np.array([[1, 2, 1]], np.int32),
                          np.array([3], np.int32), reduction="sum")
        gm.backward(loss)
    assert 80 < loss.item() < 400
    assert np.isfinite(pred.grad.numpy()).all()


# ----- bad arguments ------------------------------------------------------------------------------
X4 = np.ones((2, 4, 3, 3), np.float32)
P = np.full((3, 2, 3), 1 / 3, np.float32)
TWO, ONE = np.array([2, 2], np.int32), np.array([1, 1], np.int32)
BAD = [
    (lambda: F.instance_norm(np.ones((2, 3, 4), np.float32), False), eg.OpArgumentError,
     r"NCHW \(4-d\).*\(2, 3, 4\)"),
    (lambda: F.instance_norm(X4, True), eg.OpArgumentError, "weight and bias"),
    (lambda: F.instance_norm(X4, True, np.ones(3), np.ones(4)), eg.OpArgumentError,
     r"weight has shape \(3,\).*\(4\)"),
    (lambda: F.adaptive_max_pool2d(X4, (4, 2)), eg.OpArgumentError, r"oshp=\(4, 2\)"),
    (lambda: F.adaptive_max_pool2d(X4, 1.5), eg.OpTypeError, "oshp must be an int"),
    (lambda: F.pixel_shuffle(X4, 3), eg.OpArgumentError, r"upscale_factor \*\* 2 = 9"),
    (lambda: F.pixel_shuffle(X4, 0), eg.OpArgumentError, "upscale_factor must be >= 1"),
    (lambda: F.conv3d(X4, np.ones((2, 4, 1, 1, 1), np.float32)), eg.OpArgumentError,
     r"5-d .*\(2, 4, 3, 3\)"),
    (lambda: F.conv3d(np.ones((1, 3, 2, 2, 2), np.float32), np.ones((2, 4, 1, 1, 1),
                                                                       np.float32)),
     eg.OpArgumentError, "has 3 channels"),
    (lambda: F.conv3d(np.ones((1, 4, 2, 2, 2), np.int32), np.ones((2, 4, 1, 1, 1))),
     eg.OpTypeError, "dtype int32"),
    (lambda: F.conv3d(np.ones((1, 4, 2, 2, 2), np.float32), np.ones((2, 4, 3, 3, 3),
                                                                       np.float32)),
     eg.OpArgumentError, "larger than the input"),
    (lambda: F.conv3d(np.ones((1, 4, 2, 2, 2), np.float32), np.ones((2, 4, 1, 1, 1),
                                                                       np.float32), stride=0),
     eg.OpArgumentError, "must be >= 1"),
    (lambda: F.local_response_norm(X4, 4), eg.OpArgumentError, "positive odd int, got 4"),
    (lambda: F.local_response_norm(np.ones(3, np.float32)), eg.OpArgumentError, r"\(3,\)"),
    (lambda: F.ctc_loss(P, TWO, np.ones((2, 1), np.int32), ONE, reduction="avg"),
     eg.OpArgumentError, "reduction must be"),
    (lambda: F.ctc_loss(P, TWO.astype(np.float32), np.ones((2, 1), np.int32), ONE),
     eg.OpTypeError, "pred_lengths must hold integers"),
    (lambda: F.ctc_loss(P, np.array([2], np.int32), np.ones((2, 1), np.int32), ONE),
     eg.OpArgumentError, r"pred_lengths must have shape \(2,\)"),
    (lambda: F.ctc_loss(P, np.array([2, 4], np.int32), np.ones((2, 1), np.int32), ONE),
     eg.OpArgumentError, r"pred_lengths must lie in \[1, 3\]"),
    (lambda: F.ctc_loss(P, TWO, np.ones((2, 1), np.int32), TWO), eg.OpArgumentError,
     r"label_lengths must lie in \[1, 1\]"),
    (lambda: F.ctc_loss(P, TWO, np.ones(3, np.int32), ONE), eg.OpArgumentError,
     "sum\\(label_lengths\\) = 2"),
    (lambda: F.ctc_loss(P, TWO, np.array([[1], [3]], np.int32), ONE), eg.OpIndexError,
     "label 3 is out of range"),
    (lambda: F.ctc_loss(P, TWO, np.ones((2, 1), np.int32), ONE, blank=3), eg.OpArgumentError,
     r"blank=3"),
]


@pytest.mark.parametrize("call, error, match", BAD)
def test_bad_arguments_raise_named_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
