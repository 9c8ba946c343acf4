"""`eager.profile()` and what it reports: where a step's time goes, split the way a user can
act on it (the timing itself is `eager.core.profiling`, which the op path calls).

    with eager.profile() as prof:
        train_step()
    print(prof)
"""

from .core.profiling import KINDS, Profile, Stat, current, profile

__all__ = ["profile", "Profile", "Stat", "KINDS", "current"]
