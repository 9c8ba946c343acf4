"""Sharded, multi-host checkpoints through orbax-checkpoint: `save_checkpoint` writes a nested
state (Modules, Optimizers, Tensors, arrays, plain values) as step `directory/<step>`, each
process writing only the shards its devices hold; `load_checkpoint` reads it back in place,
each array straight onto the layout its target has now (a model on 2 devices reads what 4
wrote), with no array gathered to one host.

Note [sharded checkpoint format]: a step folder holds two orbax items. `arrays` (orbax's
PyTreeCheckpointHandler: tensorstore's OCDBT, one store per process, `ocdbt.process_<i>`, with
the chunks of that process's shards, indexed together at the commit) holds every array under
its place in the state (`state['model'].fc1.weight`). `layout` (JsonCheckpointHandler) holds
the state's containers, its plain values, each array's kind, shape and dtype, and each
optimizer's hyper-parameters, all as JSON (`checkpoint_state`). Nothing in it is pickled, so
nothing runs on load: orbax's own metadata is JSON, its legacy aggregate file (`checkpoint`,
not written here) is msgpack whose only extension types are arrays (`np.frombuffer`), and the
handler names in `_CHECKPOINT_METADATA` are looked up among classes already imported, never
imported.

Note [sharded checkpoint commit]: orbax writes a step under a temporary name
(`<step>.orbax-checkpoint-tmp...`) and renames it once every process has written its
part, so a process killed mid-save leaves the earlier steps as they were and no `<step>`
folder; `checkpoint_steps` lists committed steps only, and the next save removes leftover
temporary folders. With `keep`, older steps are deleted only after the new one is committed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, overload

import jax
import numpy as np

from ..core import context
from ..core.errors import CheckpointError
from .checkpoint_state import Plan, describe, match

__all__ = ["PendingSave", "checkpoint_steps", "load_checkpoint", "save_checkpoint"]

_FORMAT = 1  # the version of the layout item, checked on load


def _orbax() -> Any:
    """`orbax.checkpoint`, imported on first use: the import takes about 2 s, which every user
    who never writes a sharded checkpoint would otherwise pay at `import eager`."""
    try:
        import orbax.checkpoint as ocp  # type: ignore[import-untyped]  # (no py.typed)
    except ImportError as e:
        raise ImportError("sharded checkpoints need orbax-checkpoint: pip install "
                          "'orbax-checkpoint>=0.12'") from e
    return ocp


def _manager(directory: str | os.PathLike, *, keep: int | None = None, wait: bool = True,
             create: bool = True) -> Any:
    ocp = _orbax()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=create, cleanup_tmp_directories=create,
        enable_async_checkpointing=not wait)
    return ocp.CheckpointManager(os.fspath(directory), options=options, item_handlers={
        "arrays": ocp.PyTreeCheckpointHandler(), "layout": ocp.JsonCheckpointHandler()})


def checkpoint_steps(directory: str | os.PathLike) -> list[int]:
    """The committed steps in `directory`, ascending ([] when there is none or no directory).

    >>> checkpoint_steps("no/such/folder")
    []
    """
    if not os.path.isdir(directory):
        return []
    paths = _orbax().path.step.checkpoint_steps_paths(os.fspath(directory))
    return sorted(int(p.name) for p in paths if p.name.isdigit())


class PendingSave:
    """A save that `save_checkpoint(..., wait=False)` started: the arrays are already copied
    to host memory (each process its own shards), the files are written in the background.
    `wait()` (which every process must call) blocks until the step is committed."""

    def __init__(self, manager: Any, path: Path) -> None:
        self._manager, self.path = manager, path

    def done(self) -> bool:
        """Whether the background write has finished."""
        return self._manager is None or not self._manager.is_saving_in_progress()

    def wait(self) -> Path:
        """Block until the step is committed (and older ones beyond `keep` removed); returns
        its folder. Raises what the background write raised."""
        manager, self._manager = self._manager, None
        if manager is not None:
            _PENDING.pop(str(self.path.parent), None)
            try:
                manager.wait_until_finished()
            finally:
                manager.close()
        return self.path

    def __repr__(self) -> str:
        return f"PendingSave({str(self.path)!r}, done={self.done()})"


# The unfinished save of each directory in this process: a new save waits for it first, since
# the new save's start removes temporary folders (Note [sharded checkpoint commit]), its own
# among them.
_PENDING: dict[str, PendingSave] = {}


@overload
def save_checkpoint(directory: str | os.PathLike, state: Any, step: int, *,
                    keep: int | None = None, wait: Literal[True] = True) -> Path: ...
@overload
def save_checkpoint(directory: str | os.PathLike, state: Any, step: int, *,
                    keep: int | None = None, wait: Literal[False]) -> PendingSave: ...
def save_checkpoint(directory: str | os.PathLike, state: Any, step: int, *,
                    keep: int | None = None, wait: bool = True) -> Path | PendingSave:
    """Write `state` as step `step` of `directory` and return the step's folder once committed.

    Every process calls it with its own view of the same global arrays; each writes only the
    shards its devices hold (the folder must be one that every process sees: a local or shared
    filesystem). Plain values, numpy arrays and hyper-parameters are written by the first
    process (every process should pass the same). `state` nests dicts (keys str, int, float,
    bool or None), lists and tuples whose leaves are Modules (their parameters and buffers),
    Optimizers (per-parameter state and hyper-parameters), Tensors, jax or numpy arrays, and
    ints, floats, bools, strings or None.

    Args:
        directory: the checkpoint folder; steps are its sub-folders `<step>`.
        state: what to save, e.g. `{"model": net, "opt": opt, "epoch": 3}`.
        step: a non-negative int, new to `directory` (an existing step raises
            `CheckpointError`, never overwritten: a step once committed is what was saved).
        keep: if given, `keep` committed steps remain: this one and the highest-numbered
            others (orbax's `max_to_keep`; the rest are deleted once this one is committed).
        wait: with False, return a `PendingSave` once the arrays are copied to host memory
            (training may go on, even donating the saved buffers); `.wait()` commits.

    Raises:
        CheckpointError: an existing step, a bad `step` or `keep`, or a leaf a checkpoint
            cannot hold.

    >>> import eager as eg, tempfile
    >>> d = tempfile.mkdtemp()
    >>> save_checkpoint(d, {"w": eg.ones((2,)), "epoch": 3}, step=1).name
    '1'
    >>> load_checkpoint(d, {"w": eg.zeros((2,)), "epoch": 0})["epoch"]
    3
    """
    step = _check_step(step, "save_checkpoint")
    if keep is not None and (not isinstance(keep, int) or isinstance(keep, bool) or keep < 1):
        raise CheckpointError(f"save_checkpoint: keep must be a positive int or None, got "
                              f"{keep!r}")
    path = Path(os.path.abspath(os.fspath(directory))) / str(step)
    if (earlier := _PENDING.get(str(path.parent))) is not None:
        earlier.wait()
    if step in checkpoint_steps(directory):
        raise _exists(directory, step)
    arrays: dict[str, Any] = {}
    layout = {"format": _FORMAT, "state": describe(state, "state", arrays)}
    ocp = _orbax()
    items = {"layout": ocp.args.JsonSave(layout)}
    if arrays:
        items["arrays"] = ocp.args.PyTreeSave(arrays)
    manager = _manager(directory, keep=keep, wait=wait)
    try:
        manager.save(step, args=ocp.args.Composite(**items), force=True)
    except BaseException as e:
        manager.close()
        if isinstance(e, ocp.checkpoint_manager.StepAlreadyExistsError):  # a writer was first
            raise _exists(directory, step) from None
        raise
    pending = PendingSave(manager, path)
    if wait:
        return pending.wait()
    _PENDING[str(path.parent)] = pending
    return pending


def load_checkpoint(directory: str | os.PathLike, state: Any, step: int | None = None) -> Any:
    """Read step `step` (default: the newest committed one) of `directory` into `state`.

    Modules, Optimizers and Tensors in `state` are restored in place, each array read straight
    onto the sharding its target has now (each process reads only what its devices hold: a
    model on 2 devices reads a checkpoint that 4 wrote). Shapes and dtypes must equal the
    saved ones. Everything is read before anything changes, and the targets are rebound
    together (a Ctrl-C takes effect after): an error leaves them untouched. Every process
    calls it.

    Returns `state`'s structure with the saved values: plain values, numpy and jax arrays as
    read (a jax array on the sharding of the one in `state`), Modules, Optimizers and Tensors
    as the same (updated) objects. Entries of the checkpoint that `state` does not name are
    not read; a Module's or Optimizer's entries must match the saved ones exactly.

    Args:
        directory: the checkpoint folder `save_checkpoint` wrote.
        state: the targets and the structure to return, e.g. `{"model": net, "opt": opt,
            "epoch": 0}` (a plain value's own value is only a placeholder).
        step: the step to read; None reads the highest committed one.

    Raises:
        CheckpointError: no committed step (or not `step`), an entry missing from the
            checkpoint, a shape, dtype or kind that differs; the message names the entry.
    """
    steps = checkpoint_steps(directory)
    if not steps:
        raise CheckpointError(
            f"load_checkpoint: {os.fspath(directory)!r} holds no committed checkpoint (a save "
            "that did not finish leaves none); check the path, or save one with "
            "`dist.save_checkpoint` first")
    step = steps[-1] if step is None else _check_step(step, "load_checkpoint")
    if step not in steps:
        raise CheckpointError(f"load_checkpoint: {os.fspath(directory)!r} has no committed "
                              f"step {step}; its steps are {steps}")
    manager = _manager(directory, create=False)
    try:
        plan = Plan(f"step {step} of {os.fspath(directory)!r}")
        result = match(state, _read_layout(manager, step, plan), "state", plan)
        loaded = _read_arrays(manager, step, plan) if plan.reads else {}
    finally:
        manager.close()
    with context.atomic():  # all rebound, or (a signal before the block) none
        return plan.apply(result, loaded)


def _read_layout(manager: Any, step: int, plan: Plan) -> Any:
    ocp = _orbax()
    try:
        layout = manager.restore(step, args=ocp.args.Composite(layout=ocp.args.JsonRestore()))
        layout = layout["layout"]
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"load_checkpoint: could not read the layout of {plan.where}: "
                              f"{e}") from e
    if not isinstance(layout, dict) or layout.get("format") != _FORMAT:
        raise CheckpointError(f"load_checkpoint: {plan.where} is not a checkpoint written by "
                              f"`save_checkpoint` (format {_FORMAT}); it has no usable layout")
    return layout["state"]


def _read_arrays(manager: Any, step: int, plan: Plan) -> dict[str, Any]:
    """The arrays `plan` asks for, each read onto its target's sharding (orbax reads only the
    chunks of this process's shards), or as a numpy array for a host target."""
    ocp = _orbax()
    items, restore_args = {}, {}
    for name, (shape, dtype, sharding) in plan.reads.items():
        items[name], restore_args[name] = (
            (jax.ShapeDtypeStruct(shape, dtype, sharding=sharding),
             ocp.ArrayRestoreArgs(sharding=sharding, global_shape=shape, dtype=dtype))
            if sharding is not None else
            (jax.ShapeDtypeStruct(shape, dtype), ocp.RestoreArgs(restore_type=np.ndarray,
                                                                  dtype=dtype)))
    args = ocp.args.PyTreeRestore(items, restore_args, partial_restore=True)
    try:
        return dict(manager.restore(step, args=ocp.args.Composite(arrays=args))["arrays"])
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"load_checkpoint: could not read the arrays of {plan.where}: "
                              f"{e}") from e


def _check_step(step: Any, fn: str) -> int:
    if isinstance(step, bool) or not hasattr(step, "__index__") or int(step) < 0:
        raise CheckpointError(f"{fn}: step must be a non-negative int, got {step!r}")
    return int(step)


def _exists(directory: str | os.PathLike, step: int) -> CheckpointError:
    return CheckpointError(
        f"save_checkpoint: step {step} already exists in {os.fspath(directory)!r}; a committed "
        "step is never overwritten: save under a new step number (or delete that folder)")
