"""Checks of eager code against an independent reference, values and gradients:

- `check_op`: one registry op against a jax reference, gradients against `jax.vjp`;
- `check_vjp`: any eager computation (a layer with its parameters) against a jax reference,
  gradients of every leaf against `jax.vjp`;
- `check_fn`: a function of Tensors against a numpy reference, gradients against finite
  differences of the reference in float64;
- `fd_check`: an eager scalar function's gradient against its own finite differences.

References are written independently of the code under test where that is possible. The eager
gradient goes through the whole pipeline: dispatch, tape recording, the op's cached vjp,
accumulation and `GradManager.backward`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eager as eg
from eager.autodiff import GradManager


def _is_float(x: Any) -> bool:
    return isinstance(x, np.ndarray) and np.dtype(x.dtype).kind == "f"


def _as_np(x: Any) -> np.ndarray:
    return np.asarray(x.numpy() if isinstance(x, eg.Tensor) else x, dtype=np.float64)


def assert_close(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> None:
    a, e = _as_np(actual), _as_np(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=what)


def check_op(
    name: str,
    inputs: Sequence[Any],
    ref: Callable[..., Any],
    attrs: dict[str, Any] | None = None,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    grad: bool = True,
    grad_rtol: float | None = None,
    grad_atol: float | None = None,
    seed: int = 0,
) -> None:
    """Check op `name` on `inputs` (numpy arrays become Tensors; other values pass as they are).

    Float arrays are attached to a GradManager; the backward is seeded with a random cotangent
    and the gradients compared with `jax.vjp(ref)` at the same cotangent. Outputs' count,
    shapes and dtypes must match the reference's too.
    """
    attrs = attrs or {}
    op = eg.OPS[name]
    tensors = [eg.Tensor(x) if isinstance(x, np.ndarray) else x for x in inputs]
    diff = [i for i, x in enumerate(inputs) if _is_float(x) and np.dtype(x.dtype) != np.float16]
    do_grad = grad and op.differentiable and bool(diff)
    gm = GradManager().attach([tensors[i] for i in diff]) if do_grad else None
    if gm is not None:
        gm.record()
    try:
        out = eg.apply(op, *tensors, **attrs)
    except BaseException:
        if gm is not None:
            gm.release()
        raise
    outs = out if isinstance(out, tuple) else (out,)
    ref_in = [jnp.asarray(x) if isinstance(x, np.ndarray) else x for x in inputs]
    reference = _Reference(ref, ref_in, diff)
    shapes = reference.shapes()
    if shapes is not None:
        assert len(outs) == len(shapes), f"{name}: {len(outs)} outputs, expected {len(shapes)}"
        for k, (o, e) in enumerate(zip(outs, shapes)):
            assert o.shape == e.shape, f"{name} output {k}: shape {o.shape} != {e.shape}"
    cts: list = []
    diff_outs: list[int] = []
    if gm is not None:
        rng = np.random.default_rng(seed)
        diff_outs = [k for k, o in enumerate(outs)
                     if k not in op.nondiff_outputs and o.dtype.kind == "f"]
        cts = [rng.standard_normal(outs[k].shape).astype(outs[k].dtype) for k in diff_outs]
    exp_outs, exp_grads = reference.run(dict(zip(diff_outs, cts)) if diff_outs else None)
    assert len(outs) == len(exp_outs), f"{name}: {len(outs)} outputs, expected {len(exp_outs)}"
    for k, (o, e) in enumerate(zip(outs, exp_outs)):
        assert o.dtype == np.dtype(e.dtype), f"{name} output {k}: dtype {o.dtype} != {e.dtype}"
        assert_close(o, e, rtol, atol, f"{name} output {k}")
    if gm is None:
        return
    if not diff_outs:  # e.g. a cast to int: nothing to differentiate
        gm.release()
        return
    gm.backward([outs[k] for k in diff_outs], [eg.tensor(c) for c in cts])
    for i, g in zip(diff, exp_grads):
        got = tensors[i].grad
        assert got is not None, f"{name}: no gradient reached input {i}"
        assert_close(got, g, grad_rtol or rtol * 10, grad_atol or atol * 10,
                     f"{name} gradient of input {i}")


class _Reference:
    """`ref` on `ref_in`, its values and the vjp of the inputs at positions `diff`, as one jitted
    program: run op by op, a reference dispatches and compiles every jnp primitive for every new
    shape (forward, linearization and transpose apart), the larger part of these tests' time.
    Non-array inputs stay constants. A numpy reference (it cannot be traced) runs as it is."""

    def __init__(self, ref: Callable[..., Any], ref_in: list, diff: list[int]) -> None:
        self.ref, self.ref_in, self.diff = ref, ref_in, diff
        self.arrays = [i for i, x in enumerate(ref_in) if isinstance(x, jax.Array)]
        try:
            self._shapes: Any = jax.eval_shape(self._call, *self._values())
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            self._shapes = None  # reads values on the host: not traceable

    def _values(self) -> list:
        return [self.ref_in[i] for i in self.arrays]

    def _call(self, *values: Any) -> Any:
        args = list(self.ref_in)
        for i, v in zip(self.arrays, values):
            args[i] = v
        return self.ref(*args)

    def _vjp(self, values: list, cts: dict[int, Any]) -> tuple[tuple, list]:
        """(outputs as a tuple, gradients of the `diff` inputs at the cotangents `cts`, keyed
        by output position; zero for the other outputs)."""
        where = [self.arrays.index(i) for i in self.diff]

        def of_diff(*d: Any) -> Any:
            args = list(values)
            for j, v in zip(where, d):
                args[j] = v
            return self._call(*args)

        out, pullback = jax.vjp(of_diff, *(values[j] for j in where))
        outs = out if isinstance(out, tuple) else (out,)
        full = [cts[k] if k in cts else jnp.zeros(e.shape, e.dtype) for k, e in enumerate(outs)]
        return outs, list(pullback(tuple(full) if isinstance(out, tuple) else full[0]))

    def shapes(self) -> tuple | None:
        """The outputs' shapes and dtypes (None for a numpy reference)."""
        if self._shapes is None:
            return None
        return self._shapes if isinstance(self._shapes, tuple) else (self._shapes,)

    def run(self, cts: dict[int, np.ndarray] | None) -> tuple[tuple, list]:
        """(outputs, gradients of the `diff` inputs at `cts`; [] when `cts` is None)."""
        values = self._values()
        if cts is None:
            out = jax.jit(self._call)(*values) if self._shapes is not None else self._call(*values)
            return (out if isinstance(out, tuple) else (out,)), []
        cts_j = {k: jnp.asarray(c) for k, c in cts.items()}
        if self._shapes is None:
            return self._vjp(values, cts_j)
        return jax.jit(self._vjp)(values, cts_j)


def fd_check(f: Callable[..., eg.Tensor], inputs: Sequence[np.ndarray], *, eps: float = 1e-6,
             rtol: float = 1e-6, seed: int = 0) -> None:
    """Finite differences in float64 along a random direction, against the eager gradient.

    `f` takes Tensors and returns a scalar Tensor; `inputs` are float64 arrays (use under the
    `x64` fixture).
    """
    rng = np.random.default_rng(seed)
    params = [eg.Parameter(x) for x in inputs]
    gm = GradManager().attach(params)
    with gm:
        gm.backward(f(*params))
    dirs = [rng.standard_normal(x.shape) for x in inputs]
    plus = f(*(eg.tensor(x + eps * d) for x, d in zip(inputs, dirs))).item()
    minus = f(*(eg.tensor(x - eps * d) for x, d in zip(inputs, dirs))).item()
    numeric = (plus - minus) / (2 * eps)
    analytic = sum(float(np.sum(p.grad.numpy() * d)) for p, d in zip(params, dirs))
    assert abs(numeric - analytic) <= rtol * max(1.0, abs(numeric)), (numeric, analytic)


def _is_t(v):
    return isinstance(v, eg.Tensor)


def check_vjp(run, leaves, ref, *, rtol=1e-5, atol=1e-5, seed=0):
    """`run()` computes eagerly from the Tensors `leaves` (inputs and parameters); `ref(*arrays)`
    computes the same in jax from their values. Outputs (any tuple nesting) and the gradients of
    every leaf at a random cotangent must agree with `jax.vjp(ref)`."""
    want, pullback = jax.vjp(ref, *(jnp.asarray(t.numpy()) for t in leaves))
    rng = np.random.default_rng(seed)
    want_flat, tree = jax.tree.flatten(want)
    cts = [rng.standard_normal(w.shape).astype(np.float32) for w in want_flat]
    for t in leaves:
        t.grad = None
    gm = GradManager().attach(leaves)
    with gm:
        got = run()
        got_flat, got_tree = jax.tree.flatten(got, is_leaf=_is_t)
        assert got_tree == tree, f"output structure {got_tree} != {tree}"
        gm.backward(got_flat, [eg.tensor(c) for c in cts])
    for k, (g, w) in enumerate(zip(got_flat, want_flat)):
        assert g.shape == w.shape, f"output {k}: shape {g.shape} != {w.shape}"
        np.testing.assert_allclose(g.numpy(), w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    grads = pullback(jax.tree.unflatten(tree, [jnp.asarray(c) for c in cts]))
    for k, (t, g) in enumerate(zip(leaves, grads)):
        assert t.grad is not None, f"no gradient reached leaf {k}"
        np.testing.assert_allclose(t.grad.numpy(), g, rtol=rtol * 10, atol=atol * 10,
                                   err_msg=f"gradient of leaf {k}")


def check_fn(fn, ref, arrays, *, rtol=1e-5, atol=1e-5, grad_rtol=1e-4, seed=0):
    """`fn` on Tensors against the numpy `ref` in float64: the value, and the gradient of
    sum(out * a random cotangent) for each float input along a random direction against
    central finite differences of `ref`."""
    rng = np.random.default_rng(seed)
    floats = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    tensors = [eg.tensor(a) for a in arrays]
    gm = GradManager().attach([tensors[i] for i in floats])
    with gm:
        y = fn(*tensors)
        ct = np.asarray(rng.standard_normal(y.shape), np.float32)
        gm.backward(y, eg.tensor(ct))
    wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    assert_close(y, ref(*wide), rtol, atol, "value")
    eps = 1e-6
    for i in floats:
        d = rng.standard_normal(arrays[i].shape)

        def at(step, i=i, d=d):
            args = list(wide)
            args[i] = wide[i] + step * d
            return np.sum(ct * ref(*args))

        numeric = (at(eps) - at(-eps)) / (2 * eps)
        terms = tensors[i].grad.numpy().astype(np.float64) * d
        assert abs(terms.sum() - numeric) <= grad_rtol * (np.abs(terms).sum() + 1e-3), (
            f"gradient of input {i}: {terms.sum()} vs finite differences {numeric}")
