"""Non-differentiable ops that produce new state: random draws and optimizer updates.

Hyper-parameters (lr, momentum, betas, eps, weight decay) are inputs, not attributes, so a schedule
changes them without recompiling; structural choices (nesterov, decoupled decay) are attributes.
"""

import jax
import jax.numpy as jnp

from .registry import defop


@defop("random_key", differentiable=False)
def random_key(seed):
    return jax.random.key_data(jax.random.key(seed))


@defop("random_split", differentiable=False, multi_output=True)
def random_split(key):
    """Advance the framework key: returns (next key, a key to draw with)."""
    nxt, sub = jax.random.split(jax.random.wrap_key_data(key))
    return jax.random.key_data(nxt), jax.random.key_data(sub)


@defop("random_normal", differentiable=False)
def random_normal(key, mean, std, *, shape, dtype):
    return mean + std * jax.random.normal(jax.random.wrap_key_data(key), shape, dtype)


@defop("random_uniform", differentiable=False)
def random_uniform(key, low, high, *, shape, dtype):
    return jax.random.uniform(jax.random.wrap_key_data(key), shape, dtype, low, high)


@defop("random_permutation", differentiable=False)
def random_permutation(key, *, n, dtype):
    return jax.random.permutation(jax.random.wrap_key_data(key), n).astype(dtype)


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
