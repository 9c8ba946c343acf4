"""An op is one definition: its autocast rule and its argument checks are attributes of the op
that `defop` registers, not entries of tables keyed by its name (which could drift from it), and
defining an op with a check and a rule is one `defop` call that takes effect everywhere."""

import re

import numpy as np
import pytest

import eager as eg
import eager.functional as F
from eager import amp
from eager.core.amp_policy import FLOAT32, LOW
from eager.core.errors import OpArgumentError, OpTypeError
from eager.core.op_errors import require
from eager.core.ops import OPS, defop
from eager.core.tensors import apply

# The autocast rules as they were when they lived in one table (`amp_policy.POLICY`): each op
# keeps its rule, and no other op has one.
RULES = {
    **dict.fromkeys(("matmul", "einsum", "linear", "conv", "conv_transpose", "conv3d",
                     "scaled_dot_product_attention"), LOW),
    **dict.fromkeys(("sum", "mean", "prod", "var", "std", "logsumexp", "norm", "normalize",
                     "cumsum", "cumprod", "softmax", "log_softmax",
                     "batch_norm_train", "batch_norm_eval", "layer_norm", "group_norm",
                     "cross_entropy", "nll_loss", "binary_cross_entropy", "mse_loss", "l1_loss",
                     "smooth_l1_loss", "hinge_loss", "kl_div", "ctc_loss",
                     "local_response_norm"), FLOAT32),
}


def test_every_op_keeps_its_autocast_rule():
    assert OPS["conv"].amp == LOW
    assert {name: op.amp for name, op in OPS.items() if op.amp is not None} == RULES


def test_checks_are_attributes_of_the_ops():
    assert OPS["matmul"].check is not None and OPS["conv"].before is not None
    found = OPS["reshape"].explain((np.ones((3, 7)),), {"shape": (4, 5)})
    assert found[0] is OpArgumentError and "into (4, 5) (20 elements)" in found[1]
    assert OPS["exp"].explain((np.ones(3),), {}) is None  # an op without a check


def test_an_op_is_one_defop_call():
    """A toy op with a check, a before-the-call check and an autocast rule: all three take
    effect through the one definition, and the op leaves no trace in any table."""
    def check(inputs, attrs):
        return OpArgumentError, "the toy wants a vector."

    def before(inputs, attrs):
        return None if attrs["scale"] > 0 else (OpArgumentError, "scale must be > 0.")

    try:
        op = defop("toy_scale", amp=FLOAT32, check=check, before=before)(
            lambda x, *, scale: x.sum(axis=1) * scale)
        x = eg.tensor(np.ones((2, 3), np.float16))
        with amp.autocast():
            assert apply(op, x, scale=2.0).dtype == np.float32  # the rule: computed in float32
        assert apply(op, x, scale=2.0).dtype == np.float16
        with pytest.raises(OpArgumentError, match="toy_scale: scale must be > 0"):
            require("toy_scale", x, scale=0.0)
        with pytest.raises(eg.OpArgumentError, match="the toy wants a vector"):
            apply(op, eg.ones(3), scale=1.0)  # fails in jax: the check explains it
    finally:
        OPS.pop("toy_scale", None)
    assert "toy_scale" not in OPS


# ----- an op checks its own arguments -------------------------------------------------------------
# Each case: a functional call with a bad argument, the op it calls, what that op's check reads
# (the inputs and attributes the wrapper passes to `require`), the error class and the start of
# its text. The wrapper's error and the op's own finding must agree, so that the op refuses the
# argument whichever way it is called.
F32 = np.float32
IMAGE, ROIS = np.zeros((1, 2, 4, 4), F32), np.array([[0, 0, 0, 2, 2]], F32)
ALIGN = {"output_shape": (2, 2), "sample_points": (2, 2)}
PSROI = {"pooled": (3, 3), "part_size": 3, "samples": 2}
TRANS = np.zeros((1, 2, 3, 3), F32)
CTC = (np.full((5, 2, 4), 0.25, F32), np.array([5, 4], np.int32),
       np.array([[1, 2], [3, 1]], np.int32), np.array([2, 1], np.int32))
WINDOW = {"kernel": (2, 2), "padding": (0, 0), "stride": (1, 1), "dilation": (1, 1)}


def _psroi(inp=IMAGE, trans=TRANS, **options):
    kwargs = dict(no_trans=False, part_size=3, pooled_h=3, pooled_w=3, sample_per_part=2,
                  spatial_scale=1.0) | options
    return F.deformable_psroi_pooling(inp, ROIS, trans, **kwargs)


CHECKED = [
    # detection: the RoIs and the boxes
    (lambda: F.roi_align(IMAGE[0], ROIS, 2), "roi_align", (IMAGE[0], ROIS), ALIGN,
     OpArgumentError, r"needs an NCHW \(4-d\) input"),
    (lambda: F.roi_align(IMAGE, ROIS[:, 1:], 2), "roi_align", (IMAGE, ROIS[:, 1:]), ALIGN,
     OpArgumentError, r"rois must have shape \(K, 5\)"),
    (lambda: F.roi_align(IMAGE, ROIS, (2, -1)), "roi_align", (IMAGE, ROIS),
     {**ALIGN, "output_shape": (2, -1)}, OpArgumentError, "output_shape must be"),
    (lambda: F.roi_align(IMAGE, ROIS, 2, sample_points=0), "roi_align", (IMAGE, ROIS),
     {**ALIGN, "sample_points": (0, 0)}, OpArgumentError, "sample_points must be >= 1"),
    (lambda: F.roi_pooling(IMAGE.astype(np.int32), ROIS, 2), "roi_pooling",
     (IMAGE.astype(np.int32), ROIS), {"output_shape": (2, 2)}, OpTypeError,
     "the input has dtype int32; it must be a float"),
    (lambda: F.roi_pooling(IMAGE, ROIS.astype(bool), 2), "roi_pooling",
     (IMAGE, ROIS.astype(bool)), {"output_shape": (2, 2)}, OpTypeError, "rois has dtype bool"),
    (lambda: F.nms(np.zeros((3, 3), F32), np.zeros(3, F32), 0.5), "nms_keep",
     (np.zeros((3, 3), F32), np.zeros(3, F32)), {}, OpArgumentError, r"boxes must have shape"),
    (lambda: F.nms(np.zeros((3, 4), F32), np.zeros(2, F32), 0.5), "nms_keep",
     (np.zeros((3, 4), F32), np.zeros(2, F32)), {}, OpArgumentError, "scores must have shape"),
    (lambda: _psroi(inp=IMAGE.astype(np.int32)), "deformable_psroi_pooling",
     (IMAGE.astype(np.int32), ROIS, TRANS), PSROI, OpTypeError, "the input has dtype int32"),
    (lambda: _psroi(sample_per_part=0), "deformable_psroi_pooling", (IMAGE, ROIS, TRANS),
     {**PSROI, "samples": 0}, OpArgumentError, "pooled_h, pooled_w and sample_per_part"),
    (lambda: _psroi(trans=TRANS[0]), "deformable_psroi_pooling", (IMAGE, ROIS, TRANS[0]),
     PSROI, OpArgumentError, "trans must be 4-d"),
    (lambda: _psroi(trans=TRANS[:, :1]), "deformable_psroi_pooling", (IMAGE, ROIS, TRANS[:, :1]),
     PSROI, OpArgumentError, r"trans must have shape \(K, 2, pooled_h, pooled_w\) = \(1, 2, 3"),
    (lambda: _psroi(part_size=4), "deformable_psroi_pooling", (IMAGE, ROIS, TRANS),
     {**PSROI, "part_size": 4}, OpArgumentError, "part_size must be between 1 and"),
    (lambda: _psroi(trans=TRANS.astype(bool)), "deformable_psroi_pooling",
     (IMAGE, ROIS, TRANS.astype(bool)), PSROI, OpTypeError, "trans has dtype bool"),
    # normalization
    (lambda: F.batch_norm(IMAGE, None, np.ones(2, F32)), "batch_norm_eval",
     (IMAGE, None, np.ones(2, F32), None, None), {}, OpArgumentError,
     "inference needs running_mean and running_var"),
    (lambda: F.group_norm(IMAGE, 3), "group_norm", (IMAGE, np.ones(2, F32), np.zeros(2, F32)),
     {"groups": 3}, OpArgumentError, "2 channels are not divisible into 3 groups"),
    (lambda: F.instance_norm(IMAGE, True, np.ones(3, F32), np.zeros(2, F32)), "group_norm",
     (IMAGE, np.ones(3, F32), np.zeros(2, F32)), {"groups": 2}, OpArgumentError,
     r"weight has shape \(3,\); it needs one value per channel \(2\)"),
    (lambda: F.local_response_norm(IMAGE, kernel_size=4), "local_response_norm", (IMAGE,),
     {"size": 4}, OpArgumentError, "kernel_size must be a positive odd int, got 4"),
    (lambda: F.local_response_norm(np.zeros(3, F32)), "local_response_norm",
     (np.zeros(3, F32),), {"size": 5}, OpArgumentError, r"needs an \(N, C, ...\) input"),
    (lambda: F.local_response_norm(IMAGE.astype(np.int32)), "local_response_norm",
     (IMAGE.astype(np.int32),), {"size": 5}, OpTypeError, "the input has dtype int32"),
    # pooling, sliding windows and resizing
    (lambda: F.adaptive_avg_pool2d(IMAGE, 5), "adaptive_avg_pool2d", (IMAGE,),
     {"out_shape": (5, 5)}, OpArgumentError, r"oshp=\(5, 5\) must lie between \(1, 1\)"),
    (lambda: F.sliding_window(IMAGE, 2, stride=0), "sliding_window", (IMAGE,),
     {**WINDOW, "stride": (0, 0)}, OpArgumentError, "kernel_size, stride and dilation must be"),
    (lambda: F.sliding_window(IMAGE[0], 2), "sliding_window", (IMAGE[0],), WINDOW,
     OpArgumentError, "needs an NCHW input"),
    (lambda: F.sliding_window(IMAGE, 2, dilation=4), "sliding_window", (IMAGE,),
     {**WINDOW, "dilation": (4, 4)}, OpArgumentError, r"the window \(2, 2\) \(dilation \(4, 4"),
    (lambda: F.sliding_window_transpose(np.zeros((1, 2, 3, 3, 2, 2), F32), 5, 2),
     "sliding_window_transpose", (np.zeros((1, 2, 3, 3, 2, 2), F32),),
     {**WINDOW, "size": (5, 5)}, OpArgumentError, r"an output of size \(5, 5\) has windows"),
    (lambda: F.vision.interpolate(IMAGE[0], 8), "interpolate", (IMAGE[0],),
     {"mode": "bilinear"}, OpArgumentError, "needs an NCHW input"),
    (lambda: F.vision.interpolate(IMAGE.astype(np.int32), 8), "interpolate",
     (IMAGE.astype(np.int32),), {"mode": "bilinear"}, OpTypeError,
     "bilinear needs a float input, got dtype int32"),
    (lambda: F.pixel_shuffle(IMAGE, 0), "pixel_shuffle", (IMAGE,), {"factor": 0},
     OpArgumentError, "upscale_factor must be >= 1"),
    (lambda: F.pixel_shuffle(IMAGE, 2), "pixel_shuffle", (IMAGE,), {"factor": 2},
     OpArgumentError, r"the input of shape \(1, 2, 4, 4\) needs at least 3 axes"),
    # neural-network layers
    (lambda: F.dropout(eg.ones(3), 1.0), "dropout", (np.ones(3, F32),), {"drop_prob": 1.0},
     OpArgumentError, r"drop_prob must be in \[0, 1\), got 1.0"),
    (lambda: F.dropout(eg.ones(3), -0.5, training=False), "dropout", (np.ones(3, F32),),
     {"drop_prob": -0.5}, OpArgumentError, "drop_prob must be in"),
    (lambda: F.prelu(IMAGE, np.ones(3, F32)), "prelu", (IMAGE, np.ones(3, F32)), {},
     OpArgumentError, r"weight has 3 elements for an input of shape \(1, 2, 4, 4\)"),
    (lambda: F.embedding(np.array([0.0, 1.0]), np.ones((3, 2), F32)), "embedding",
     (np.array([0.0, 1.0]), np.ones((3, 2), F32)), {}, OpTypeError,
     "indices must be integers, got dtype float64"),
    (lambda: F.one_hot(eg.tensor([0.5]), 3), "one_hot", (np.array([0.5], F32),), {},
     OpTypeError, "x must hold integer class indices, got dtype float32"),
    # shapes, selections, order and linear algebra
    (lambda: F.tril(np.ones(3, F32)), "tril", (np.ones(3, F32),), {"k": 0}, OpArgumentError,
     r"needs a matrix \(or a batch of them"),
    (lambda: F.diag(np.ones((2, 3, 4), F32)), "diag", (np.ones((2, 3, 4), F32),), {"k": 0},
     OpArgumentError, "inp must be 1-d"),
    (lambda: F.diag(np.ones((2, 3), F32), k=3), "diag", (np.ones((2, 3), F32),), {"k": 3},
     OpArgumentError, r"a matrix of shape \(2, 3\) has no diagonal k=3"),
    (lambda: F.meshgrid(), "meshgrid", (), {"indexing": "xy"}, OpArgumentError,
     "needs at least one 1-d tensor"),
    (lambda: F.meshgrid(np.ones(2, F32), np.ones((2, 2), F32)), "meshgrid",
     (np.ones(2, F32), np.ones((2, 2), F32)), {"indexing": "xy"}, OpArgumentError,
     "input 1 must be 1-d"),
    (lambda: F.meshgrid(np.ones(2, F32), np.ones(2, np.int32)), "meshgrid",
     (np.ones(2, F32), np.ones(2, np.int32)), {"indexing": "xy"}, OpTypeError,
     r"the inputs must share one dtype, got float32 \(input 0\) and int32 \(input 1\)"),
    (lambda: F.nonzero(eg.tensor(1.0)), "nonzero", (np.float32(1),), {}, OpArgumentError,
     "needs at least one axis, got a 0-d tensor"),
    (lambda: F.cond_take(np.ones(2, F32), np.ones(2, F32)), "cond_take",
     (np.ones(2, F32), np.ones(2, F32)), {}, OpTypeError, "mask must be a bool tensor"),
    (lambda: F.cond_take(np.ones(2, bool), np.ones(3, F32)), "cond_take",
     (np.ones(2, bool), np.ones(3, F32)), {}, OpArgumentError,
     r"mask of shape \(2,\) must have the shape of x, \(3,\)"),
    (lambda: F.sort(eg.tensor(1.0)), "sort", (np.float32(1),), {}, OpArgumentError,
     r"needs at least one axis \(it works along the last one\)"),
    (lambda: F.topk(eg.tensor(1.0), 1), "topk", (np.float32(1),), {}, OpArgumentError,
     "needs at least one axis"),
    (lambda: F.dot(np.ones((2, 2), F32), np.ones(2, F32)), "dot",
     (np.ones((2, 2), F32), np.ones(2, F32)), {}, OpArgumentError, "inp1 must be 1-d or 0-d"),
    (lambda: F.dot(np.ones(2, F32), np.ones(3, F32)), "dot", (np.ones(2, F32), np.ones(3, F32)),
     {}, OpArgumentError, r"inp1 of shape \(2,\) and inp2 of shape \(3,\)"),
    (lambda: F.matinv(np.ones((2, 3), F32)), "matinv", (np.ones((2, 3), F32),), {},
     OpArgumentError, "needs square matrices"),
    (lambda: F.svd(np.ones(3, F32)), "svd", (np.ones(3, F32),), {}, OpArgumentError,
     r"needs a matrix or a batch of them \(\.\.\., M, N\)"),
    (lambda: F.matinv(np.ones((2, 2), np.int32)), "matinv", (np.ones((2, 2), np.int32),), {},
     OpTypeError, "needs a floating-point tensor, got dtype int32"),
    (lambda: F.einsum("ij,jk->ik", np.ones((2, 3), F32)), "einsum", (np.ones((2, 3), F32),),
     {"subscripts": "ij,jk->ik"}, OpArgumentError, "'ij,jk->ik' names 2 operands, got 1"),
    (lambda: F.einsum("ij->i", np.ones(3, F32)), "einsum", (np.ones(3, F32),),
     {"subscripts": "ij->i"}, OpArgumentError, "term 'ij' of 'ij->i' does not fit operand 0"),
    (lambda: F.einsum("ij,jk", np.ones((2, 3), F32), np.ones((4, 2), F32)), "einsum",
     (np.ones((2, 3), F32), np.ones((4, 2), F32)), {"subscripts": "ij,jk"}, OpArgumentError,
     "label 'j' of 'ij,jk' has size 4 in operand 1"),
    (lambda: F.topk_accuracy(np.ones((2, 3), F32), np.zeros(3, np.int32)), "topk_accuracy",
     (np.ones((2, 3), F32), np.zeros(3, np.int32)), {"topk": 1}, OpArgumentError,
     r"needs logits \(N, C\) and target \(N,\)"),
    (lambda: F.topk_accuracy(np.ones((2, 3), F32), np.zeros(2, np.int32), [1, 4]),
     "topk_accuracy", (np.ones((2, 3), F32), np.zeros(2, np.int32)), {"topk": [1, 4]},
     OpArgumentError, r"topk must be an int or ints in \[1, 3\] .*, got \[1, 4\]"),
    # losses
    (lambda: F.cross_entropy(np.ones((2, 3), F32), np.zeros(2, np.int32), axis=2),
     "cross_entropy", (np.ones((2, 3), F32), np.zeros(2, np.int32)), {"axis": 2},
     OpArgumentError, r"axis 2 is out of range for pred of shape \(2, 3\)"),
    (lambda: F.nll_loss(np.ones((2, 3), F32), np.zeros(2, np.int32), axis=-3), "nll_loss",
     (np.ones((2, 3), F32), np.zeros(2, np.int32)), {"axis": -3}, OpArgumentError,
     "axis -3 is out of range"),
    (lambda: F.hinge_loss(np.ones(3, F32), np.ones(3, F32)), "hinge_loss",
     (np.ones(3, F32), np.ones(3, F32)), {}, OpArgumentError,
     r"pred must have shape \(N, C\), got 1 axes"),
    (lambda: F.ctc_loss(*CTC[:1], np.ones(2, F32), *CTC[2:]), "ctc_loss",
     (CTC[0], np.ones(2, F32), *CTC[2:]), {"blank": 0}, OpTypeError,
     "pred_lengths must hold integers, got dtype float32"),
    (lambda: F.ctc_loss(CTC[0][:, :1], *CTC[1:]), "ctc_loss", (CTC[0][:, :1], *CTC[1:]),
     {"blank": 0}, OpArgumentError, r"pred_lengths must have shape \(1,\), one length"),
    (lambda: F.ctc_loss(*CTC[:2], CTC[2][:1], CTC[3]), "ctc_loss",
     (*CTC[:2], CTC[2][:1], CTC[3]), {"blank": 0}, OpArgumentError,
     r"label must be \(N, S\) with N = 2"),
    (lambda: F.ctc_loss(*CTC, blank=4), "ctc_loss", CTC, {"blank": 4}, OpArgumentError,
     r"blank=4 must be a class of pred \(5, 2, 4\)"),
    (lambda: F.ctc_loss(CTC[0].astype(np.int32), *CTC[1:]), "ctc_loss",
     (CTC[0].astype(np.int32), *CTC[1:]), {"blank": 0}, OpArgumentError,
     r"pred must be a float \(T, N, C\) tensor"),
    # the ops' own attributes: what jax would compute regardless, or refuse only when compiling
    (lambda: F.norm(np.ones(3, F32), ord=-1), "norm", (np.ones(3, F32),), {"ord": -1.0},
     OpArgumentError, r"ord must be >= 0 or \+-inf, got -1.0"),
    (lambda: F.normalize(np.ones(3, F32), ord=-2), "normalize", (np.ones(3, F32),),
     {"ord": -2.0}, OpArgumentError, "ord must be >= 0"),
    (lambda: F.smooth_l1_loss(np.ones(3, F32), np.ones(3, F32), beta=-1), "smooth_l1_loss",
     (np.ones(3, F32), np.ones(3, F32)), {"beta": -1}, OpArgumentError,
     "beta must be >= 0, got -1"),
    (lambda: F.tile(np.ones(3, F32), (2, -1)), "tile", (np.ones(3, F32),), {"reps": (2, -1)},
     OpArgumentError, r"reps \(2, -1\) must be >= 0"),
]


@pytest.mark.parametrize("call, name, inputs, attrs, error, text", CHECKED)
def test_an_op_checks_what_its_wrapper_reported(call, name, inputs, attrs, error, text):
    """The wrapper's error is the op's own finding, prefixed by the function's name: asked of
    the op (`Op.check_before`) and raised by `require` alike."""
    found = OPS[name].check_before(inputs, attrs)
    assert found is not None, f"{name} finds nothing wrong"
    assert found[0] is error and re.match(text, found[1]), found
    with pytest.raises(error) as raised:
        call()
    assert str(raised.value).partition(": ")[2].startswith(found[1])
    with pytest.raises(error, match=f"^{name}: {re.escape(found[1])}"):
        require(name, *inputs, **attrs)


# Ops called directly (no wrapper, no `require`) whose jax function fails on these arguments:
# the op's check explains the failure in the wrapper's words.
FAILING = [
    ("roi_align", (IMAGE[0], ROIS), {**ALIGN, "mode": "average", "spatial_scale": 1.0,
                                     "offset": 0.5}, r"needs an NCHW \(4-d\) input"),
    ("sliding_window", (IMAGE[0],), WINDOW, "needs an NCHW input"),
    ("group_norm", (IMAGE, None, None), {"groups": 3, "eps": 1e-5},
     "2 channels are not divisible into 3 groups"),
    ("dot", (np.ones(2, F32), np.ones(3, F32)), {}, r"inp1 of shape \(2,\) and inp2"),
    ("matinv", (np.ones((2, 3), F32),), {}, "needs square matrices"),
    ("einsum", (np.ones((2, 3), F32), np.ones((4, 2), F32)), {"subscripts": "ij,jk"},
     "label 'j' of 'ij,jk' has size 4 in operand 1"),
    ("nonzero", (np.float32(1),), {"size": 1, "as_tuple": False}, "needs at least one axis"),
]


@pytest.mark.parametrize("name, inputs, attrs, text", FAILING)
def test_a_direct_call_is_explained_in_the_same_words(name, inputs, attrs, text):
    tensors = [None if x is None else eg.tensor(x) for x in inputs]
    with pytest.raises(eg.OpArgumentError, match=f"^{name}: {text}"):
        apply(OPS[name], *tensors, **attrs)
