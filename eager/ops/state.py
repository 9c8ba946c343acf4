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


@defop("sgd_update", differentiable=False, multi_output=True)
def sgd_update(param, grad, buf, lr, momentum, weight_decay, *, nesterov):
    """PyTorch/MegEngine SGD: buf = momentum*buf + g; step along g + momentum*buf if nesterov."""
    g = grad + weight_decay * param
    buf = momentum * buf + g
    step = g + momentum * buf if nesterov else buf
    return param - lr * step, buf


@defop("sgd_plain_update", differentiable=False)
def sgd_plain_update(param, grad, lr, weight_decay):
    return param - lr * (grad + weight_decay * param)


@defop("adam_update", differentiable=False, multi_output=True)
def adam_update(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay, *, decoupled):
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
