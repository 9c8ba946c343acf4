"""Optimizer updates: non-differentiable ops that write new parameters and optimizer state.

Hyper-parameters (lr, momentum, betas, eps, weight decay) are inputs, not attributes, so a schedule
changes them without recompiling; structural choices (nesterov, decoupled decay) are attributes.
"""

import jax.numpy as jnp

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
defop("sgd_update", differentiable=False, multi_output=True,
      donate=_lists(0, 2))(_foreach(_sgd, 3))
defop("sgd_plain_update", differentiable=False, multi_output=True,
      donate=_lists(0))(_foreach(_sgd_plain, 2))
defop("adam_update", differentiable=False, multi_output=True,
      donate=_lists(0, 2, 3, 4))(_foreach(_adam, 5))
