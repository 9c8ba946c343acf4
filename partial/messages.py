"""What both engines (the capture and the lazy recorder) say, written once so that they say the
same: the errors for what a region may not do, and the recompile warning."""

from __future__ import annotations

import logging
from typing import Any

from eager.hooks import describe_location, user_location

from .errors import UnsupportedInRegionError, UnsupportedOutputError, ValueReadError

logger = logging.getLogger("partial")


def value_read_error(kind: str, what: str) -> ValueReadError:
    """`what` (".item()", "bool()") read a tensor's value inside a region without breaks."""
    return ValueReadError(
        f"{describe_location(user_location())}: {what} reads the value of a tensor inside a "
        f"{kind} region, where tensors stand for values computed later by the compiled code. "
        "Move the read out of the region (return the tensor and read it after the call), read "
        "it inside `with exclude_from_trace():`, pass graph_breaks=True to split the region "
        "there, or, for a data-dependent choice, compute both sides and pick with "
        "F.where(cond, a, b).")


def updated_leaf_in_partial_trace(t: Any) -> UnsupportedInRegionError:
    """A tensor attached to a recording GradManager was rebound inside a `partial_trace`
    region and then used by a recorded op: its gradient would be taken with respect to the
    value it had before the region, which the compiled segment cannot do."""
    return UnsupportedInRegionError(
        f"{describe_location(user_location())}: a tensor of shape {tuple(t.shape)} attached to a "
        "recording GradManager was updated inside this partial_trace region and then used "
        "while recording. Its gradient belongs to the new value, which a compiled segment "
        "cannot hand back. Update it before the region, or inside "
        "`with exclude_from_trace():` (the region breaks there and goes on with the new value).")


def collective_with_breaks(kind: str, op: Any) -> UnsupportedInRegionError:
    """A per-rank collective (`dist.functional`, `SyncBatchNorm`, `make_allreduce_cb`) in a
    region that breaks: each stretch between breaks would have to be compiled per rank."""
    return UnsupportedInRegionError(
        f"{describe_location(user_location())}: the per-rank collective {op.name} runs in a "
        f"{kind} region that has graph breaks; compiled collectives need a region without "
        "breaks. Move the exclude_from_trace() block or value read (the break) out of the "
        "region, move the collective out of it (it runs eagerly there), or train in the "
        "global-array style (dist.shard_batch / dist.replicate), where XLA inserts the "
        "all-reduce.")


def break_without_host(kind: str, what: str, where: Any) -> UnsupportedInRegionError:
    """A graph break in a region decorated with `without_host=True`."""
    return UnsupportedInRegionError(
        f"{describe_location(where)}: {what} would break this {kind} region, but it was "
        "decorated with without_host=True (no Python runs per call). Move the block or value "
        "read out of the region, or drop without_host=True to let the region split there.")


def backward_in_partial_trace() -> UnsupportedInRegionError:
    """`GradManager.backward` inside a `partial_trace` region."""
    return UnsupportedInRegionError(
        f"{describe_location(user_location())}: GradManager.backward inside a partial_trace "
        "region. A partial_trace region compiles a forward (and its backward runs when you call "
        "gm.backward outside it); to compile forward, backward and update together use "
        "xla_trace.")


def function_in_region(kind: str, function: Any, why: str,
                       instead: str) -> UnsupportedInRegionError:
    """A custom autodiff `Function` called where its backward would not run (`why`)."""
    return UnsupportedInRegionError(
        f"{describe_location(user_location())}: the custom autodiff Function "
        f"{type(function).__name__} is called inside a {kind} region, {why}. {instead}")


def warn_recompile(kind: str, what: str, count: int, limit: int, why: str,
                   advice: str) -> None:
    """`what` ("`f` (file.py:3)", "segment 2 of `f` ...") compiles for the `count`. time."""
    logger.warning("%s: %s is being captured and compiled for the %d. time (recompile_limit=%d)"
                   ": %s. %s", kind, what, count, limit, why, advice)


def ragged_output_error(kind: str) -> UnsupportedOutputError:
    """A region kept, in state, a tensor whose size depends on the data it computed."""
    return UnsupportedOutputError(
        f"{describe_location(user_location())}: this {kind} region keeps, in a tensor that "
        "existed before the call, a tensor made by a boolean selection (x[mask], F.nonzero, "
        "F.cond_take), whose size depends on values computed by the compiled code. Return it "
        "instead (a region may return such a tensor), reduce it inside the region (.sum(), "
        ".mean(), a loss), or select inside `with exclude_from_trace():`.")
