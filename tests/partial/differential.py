"""The differential check behind most `partial` tests: run the same program eagerly and
compiled, and compare everything a user can observe.

A test writes `build(wrap) -> World`: it creates its modules, optimizers and tensors, wraps the
region function with `wrap` (identity for the eager run, `partial_trace` or `xla_trace` for the
compiled one) and returns a `World` whose `step(i)` runs one step and returns what to compare.
Both runs start from the same framework seed. After the steps, `check_against_eager` compares the
step outputs and a snapshot of the parameters, their `.grad`, buffers, optimizer state, extra
tensors and the RNG key.

A test that drives both runs itself (`test_stateful.py` compares after every call) uses the
pieces: `snapshot` for the state and `assert_states_close` for the comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

import eager as eg
from partial import partial_trace


@dataclass
class World:
    step: Callable[[int], Any]
    modules: list = field(default_factory=list)
    optimizers: list = field(default_factory=list)
    tensors: dict = field(default_factory=dict)
    traced: list = field(default_factory=list)  # the compiled functions, for cache checks


def to_numpy(tree: Any) -> Any:
    """Tensors become numpy arrays; everything else stays."""
    return jax.tree.map(lambda x: x.numpy() if isinstance(x, eg.Tensor) else x, tree,
                        is_leaf=lambda x: isinstance(x, eg.Tensor))


def snapshot(world: World) -> dict[str, Any]:
    """Every piece of state of `world`, by name, as numpy arrays (or None for absent grads)."""
    state: dict[str, Any] = {}

    def add(name: str, t: eg.Tensor) -> None:
        state[name] = t.numpy()
        state[f"{name}.grad"] = None if t.grad is None else t.grad.numpy()

    for i, m in enumerate(world.modules):
        for name, t in m.named_parameters():
            add(f"module{i}.{name}", t)
        for name, t in m.named_buffers():
            add(f"module{i}.{name}", t)
    # optimizer state by its parameter's name where a module of the world holds the parameter
    names = {id(t): f"module{i}.{name}" for i, m in enumerate(world.modules)
             for name, t in m.named_parameters()}
    for i, opt in enumerate(world.optimizers):
        for j, (p, s) in enumerate(opt.state.items()):
            for k, t in s.items():
                state[f"optimizer{i}.{names.get(id(p), f'param{j}')}.{k}"] = t.numpy()
    for name, t in world.tensors.items():
        add(name, t)
    state["rng"] = eg.random.get_state().numpy()
    return state


def assert_trees_close(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> None:
    a_leaves, a_tree = jax.tree.flatten(actual, is_leaf=lambda x: x is None)
    e_leaves, e_tree = jax.tree.flatten(expected, is_leaf=lambda x: x is None)
    assert a_tree == e_tree, f"{what}: structure {a_tree} != {e_tree}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if e is None or isinstance(e, (str, bool, int)) and not isinstance(e, np.ndarray):
            assert a == e, f"{what} leaf {i}: {a!r} != {e!r}"
            continue
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape and a.dtype == e.dtype, \
            f"{what} leaf {i}: {a.shape} {a.dtype} != {e.shape} {e.dtype}"
        if e.dtype.kind in "fc":
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"{what} leaf {i}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"{what} leaf {i}")


def assert_states_close(got: dict[str, Any], want: dict[str, Any], rtol: float, atol: float,
                        where: str = "") -> None:
    """Assert that the compiled run's quantities `got` match the eager run's `want` (dicts by
    name, as `snapshot` makes them), naming the first that differs: the same names, None (an
    absent gradient) exactly where eager has None, the RNG key bit for bit, everything else as
    `assert_trees_close` compares it. `where` starts every message."""
    at = f"{where}: " if where else ""
    assert got.keys() == want.keys(), \
        f"{at}compiled has {sorted(got.keys() ^ want.keys())} differently from eager"
    for k, e in want.items():
        a = got[k]
        if e is None or a is None:
            assert a is None and e is None, (
                f"{at}{k} is {'None' if a is None else 'set'} compiled but "
                f"{'None' if e is None else 'set'} eagerly")
        elif k == "rng":
            np.testing.assert_array_equal(a, e, err_msg=f"{at}the RNG key")
        else:
            assert_trees_close(a, e, rtol, atol, f"{at}{k}")


def assert_all_close(got: list, want: list, rtol: float = 2e-5, atol: float = 2e-5) -> None:
    """Pairwise allclose of two lists of arrays, where None (an absent gradient) must match
    None."""
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def run(build: Callable[[Callable], World], wrap: Callable, steps: int,
        seed: int) -> tuple[list, dict, World]:
    eg.random.seed(seed)
    world = build(wrap)
    outs = [to_numpy(world.step(i)) for i in range(steps)]
    return outs, snapshot(world), world


def check_against_eager(build: Callable[[Callable], World], steps: int = 3, *,
                        rtol: float = 1e-5, atol: float = 1e-5, seed: int = 0,
                        compile: Callable = partial_trace, **options: Any) -> World:
    """Run `build` eagerly and with `compile(**options)` (`partial_trace` by default, or
    `xla_trace`) for `steps` steps and assert that outputs and state agree. Returns the
    compiled world (for cache assertions)."""
    eager_outs, eager_state, _ = run(build, lambda f: f, steps, seed)
    compiled_outs, compiled_state, world = run(
        build, lambda f: compile(f, **options), steps, seed)
    for i, (a, e) in enumerate(zip(compiled_outs, eager_outs)):
        assert_trees_close(a, e, rtol, atol, f"step {i} outputs")
    assert_states_close(compiled_state, eager_state, rtol, atol)
    return world
