"""The tables keyed by op name name registered ops: renaming or removing an op in the registry
(`eager.OPS`) must not silently drop its autocast rule or its argument checks, since a table
looks an op up by name and a key naming no op is simply never found."""

import pytest

import eager  # noqa: F401  (registers every op, the collectives of eager.distributed included)
from eager.core.amp_policy import POLICY
from eager.core.op_checks import _CHECKS
from eager.core.ops import OPS

# The tables, with where they live for the failure message. `_CHECKS` also holds the checks a
# functional wrapper runs before its call (`op_errors.require("conv:before", ...)`), keyed
# "<op>:<phase>".
TABLES = {"POLICY (eager/core/amp_policy.py)": POLICY, "_CHECKS (eager/core/op_checks.py)": _CHECKS}
PHASES = ("before",)


def stale_keys(table):
    """The keys of `table` that name no registered op (nor '<op>:<phase>' of one)."""
    def names_op(key):
        op, _, phase = key.partition(":")
        return op in OPS and (not phase or phase in PHASES)

    return sorted(key for key in table if not names_op(key))


@pytest.mark.parametrize("where", TABLES)
def test_every_key_names_a_registered_op(where):
    stale = stale_keys(TABLES[where])
    assert not stale, (
        f"{where} has keys that name no op in eager.OPS: {stale}. An op was renamed or "
        "removed: key its entry by the op's new name (or drop it with the op).")


def test_a_stale_key_is_reported():
    assert stale_keys({"matmul": 1, "conv:before": 2}) == []
    assert stale_keys({"matmul": 1, "matmull": 2, "conv:after": 3, "nonesuch:before": 4}) == [
        "conv:after", "matmull", "nonesuch:before"]
