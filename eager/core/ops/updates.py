"""Optimizer updates: non-differentiable ops that write new parameters and optimizer state, and
the (differentiable) gradient clipping that runs before them.

Hyper-parameters (lr, momentum, betas, eps, weight decay, clipping bounds) are inputs, not
attributes, so a schedule changes them without recompiling; structural choices (nesterov, decoupled
decay, the norm's order) are attributes.
"""

import jax
import jax.numpy as jnp

from .reduction import vector_norm
from .registry import defop


def _sgd(param, grad, buf, lr, momentum, weight_decay, *, nesterov):
    """PyTorch/MegEngine SGD: buf = momentum*buf + g; step along g + momentum*buf if nesterov."""
    g = grad + weight_decay * param
    buf = momentum * buf + g
    step = g + momentum * buf if nesterov else buf
    return param - lr * step, buf


def _sgd_plain(param, grad, lr, weight_decay):
    return (param - lr * (grad + weight_decay * param),)


def _adam(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay, *, decoupled):
    """Adam with bias correction; `decoupled` gives AdamW's decay of the parameter itself.
    Returns the new (param, m, v, step)."""
    step = step + 1
    if decoupled:
        param = param * (1 - lr * weight_decay)
    else:
        grad = grad + weight_decay * param
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * jnp.square(grad)
    t = step.astype(param.dtype)
    denom = jnp.sqrt(v) / jnp.sqrt(1 - beta2**t) + eps
    return param - (lr / (1 - beta1**t)) * m / denom, m, v, step


def _adagrad(param, grad, square_avg, step, lr, lr_decay, eps, weight_decay):
    """MegEngine's Adagrad: the sum of squared gradients scales the step, with eps inside the
    square root (PyTorch adds it outside); lr decays as lr / (1 + (t - 1) lr_decay).
    Returns the new (param, square_avg, step)."""
    step = step + 1
    grad = grad + weight_decay * param
    square_avg = square_avg + jnp.square(grad)
    clr = lr / (1 + (step.astype(param.dtype) - 1) * lr_decay)
    return param - clr * grad / jnp.sqrt(square_avg + eps), square_avg, step


def _adadelta(param, grad, square_avg, acc_delta, step, lr, rho, eps, weight_decay):
    """Adadelta: running averages of squared gradients and of squared steps set a per-element
    step size. Returns the new (param, square_avg, acc_delta, step)."""
    grad = grad + weight_decay * param
    square_avg = rho * square_avg + (1 - rho) * jnp.square(grad)
    delta = jnp.sqrt(acc_delta + eps) / jnp.sqrt(square_avg + eps) * grad
    acc_delta = rho * acc_delta + (1 - rho) * jnp.square(delta)
    return param - lr * delta, square_avg, acc_delta, step + 1


def _lamb(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay, *, bias_correction,
          always_adapt):
    """MegEngine's LAMB: an Adam direction plus weight_decay * param, scaled per tensor by the
    trust ratio |param| / |direction| (1 when either norm is zero, or when weight_decay is 0
    unless `always_adapt`). Returns the new (param, m, v, step)."""
    step = step + 1
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * jnp.square(grad)
    t = step.astype(param.dtype)
    bc1, bc2 = (1 - beta1**t, 1 - beta2**t) if bias_correction else (1.0, 1.0)
    r = (m / bc1) / (jnp.sqrt(v / bc2) + eps) + weight_decay * param
    p_norm, r_norm = vector_norm(param.ravel()), vector_norm(r.ravel())
    adapt = (p_norm > 0) & (r_norm > 0)
    if not always_adapt:  # weight_decay is an input, so its sign is tested in the program
        adapt = adapt & (weight_decay > 0)
    trust = jnp.where(adapt, p_norm / jnp.where(adapt, r_norm, 1), 1)
    return param - (lr * trust) * r, m, v, step


def _clip_value(grad, lower, upper):
    return (jnp.clip(grad, lower, upper),)


def _clip_grad_norm(*args, n, ord):
    """The inputs are `n` gradients, then `max_norm`. Each gradient is scaled by
    min(1, max_norm / (total + 1e-6)), where total is the `ord`-norm of all of them as one vector
    (accumulated in at least float32). Returns the scaled gradients, then the total norm."""
    grads, max_norm = args[:n], args[n]
    acc = jnp.result_type(jnp.float32, *grads)
    norms = jnp.stack([vector_norm(g.astype(acc).ravel(), ord) for g in grads])
    total = vector_norm(norms, ord)
    scale = jnp.minimum(max_norm / (total + 1e-6), 1)
    return (*[(g * scale).astype(g.dtype) for g in grads], total)


def _foreach(update, lists):
    """`update` for each of `n` parameters at once (one executable per param group, like
    PyTorch's `foreach`): the inputs are `lists` lists of n tensors (parameters, gradients,
    state...) then the shared hyper-parameters; the outputs are `update`'s first output for all
    parameters, then its second output for all, and so on."""

    def update_all(*args, n, **attrs):
        tensors = [args[i * n:(i + 1) * n] for i in range(lists)]
        outs = [update(*ts, *args[lists * n:], **attrs) for ts in zip(*tensors)]
        return tuple(o[k] for k in range(len(outs[0])) for o in outs)

    update_all.__doc__ = update.__doc__
    return update_all


def _lists(*which):
    """Donated inputs: the tensors of the input lists `which` (e.g. parameters and state)."""
    return lambda n, **_: tuple(i for w in which for i in range(w * n, (w + 1) * n))


# The updates write new parameters and state: the old buffers are donated when nothing else
# holds them, so a step updates in place instead of allocating (and faulting in) new memory.
defop("sgd_update", differentiable=False, multi_output=True, quick=True,
      donate=_lists(0, 2))(_foreach(_sgd, 3))
defop("sgd_plain_update", differentiable=False, multi_output=True, quick=True,
      donate=_lists(0))(_foreach(_sgd_plain, 2))
defop("adam_update", differentiable=False, multi_output=True, quick=True,
      donate=_lists(0, 2, 3, 4))(_foreach(_adam, 5))
defop("adagrad_update", differentiable=False, multi_output=True, quick=True,
      donate=_lists(0, 2, 3))(_foreach(_adagrad, 4))
defop("adadelta_update", differentiable=False, multi_output=True, quick=True,
      donate=_lists(0, 2, 3, 4))(_foreach(_adadelta, 5))
defop("lamb_update", differentiable=False, multi_output=True, quick=True,
      donate=_lists(0, 2, 3, 4))(_foreach(_lamb, 5))
# Gradient clipping is differentiable (an outer GradManager can record it); nothing is donated,
# since a recorded backward reads the old gradients.
defop("clip_grad_norm", multi_output=True)(_clip_grad_norm)
defop("clip_grad_value", multi_output=True, quick=True)(_foreach(_clip_value, 1))
# A gradient laid out split over a mesh (ZeRO-2, `dist.shard_params(stage=2)`): eagerly a move;
# inside a compiled step a constraint, so XLA keeps only each device's part of the summed
# gradient. The identity for differentiation.
defop("gradient_layout")(lambda grad, *, sharding: jax.lax.with_sharding_constraint(grad, sharding))
