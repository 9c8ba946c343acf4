"""The framework's random number generator (MegEngine's `megengine.random`, code in `rng.py`):
one jax PRNG key, held in a Tensor.

Every random op splits the key (`next_key`) and draws with the split-off part, so eager code and a
captured region that draw the same numbers in the same order see bit-identical values: both split
the same key the same way. Because the key is an ordinary Tensor, a capture lifts it as an input
and writes it back like any other state.

>>> import eager as eg
>>> eg.random.seed(0)
>>> a = eg.random.normal(size=(2,))
>>> eg.random.seed(0)
>>> bool((eg.random.normal(size=(2,)) == a).numpy().all())
True
"""

from .rng import (
    RNG,
    beta,
    gamma,
    get_rng_state,
    get_state,
    next_key,
    normal,
    permutation,
    poisson,
    randint,
    seed,
    set_rng_state,
    shuffle,
    uniform,
)

__all__ = ["seed", "get_state", "next_key", "normal", "uniform", "permutation", "shuffle",
           "randint", "gamma", "beta", "poisson", "get_rng_state", "set_rng_state", "RNG"]
