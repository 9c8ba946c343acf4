"""An op is one definition: its autocast rule and its argument checks are attributes of the op
that `defop` registers, not entries of tables keyed by its name (which could drift from it), and
defining an op with a check and a rule is one `defop` call that takes effect everywhere."""

import numpy as np
import pytest

import eager as eg
from eager import amp
from eager.core.amp_policy import FLOAT32, LOW
from eager.core.errors import OpArgumentError
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
