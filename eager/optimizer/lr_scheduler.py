"""Learning-rate schedules that write `lr` into an optimizer's param groups (PyTorch semantics:
construction sets epoch 0, each `step()` advances one epoch).

Warm-up: `LinearWarmup(sched, warmup_steps)` scales any schedule (or, given the optimizer, the
base lr) by a factor rising linearly to 1 over the first `warmup_steps` steps; PyTorch's
`LinearLR` is here too.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..core.errors import OpArgumentError
from .optimizer import Optimizer, require


class LRScheduler:
    """Base class: subclasses give `lr_at(base_lr, epoch, group)`, the lr of param group
    `group` at `epoch`, or override `get_lr()` (MegEngine's and PyTorch's way: the list of
    every group's lr at `self.current_epoch`, from `self.base_lrs`).

    `state_dict()` holds the schedule's settings and `current_epoch` (MegEngine's format);
    `load_state_dict` also takes PyTorch's, whose epoch is `last_epoch`.
    """

    _unsaved: tuple[str, ...] = ("optimizer", "lr_lambdas", "base_lrs")  # not in state_dict()

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1,
                 current_epoch: int | None = None):
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g.setdefault("initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        # MegEngine names the starting epoch `current_epoch`, PyTorch `last_epoch`: both work
        self.current_epoch = last_epoch if current_epoch is None else int(current_epoch)
        self.step()

    @property
    def last_epoch(self) -> int:
        """PyTorch's name of `current_epoch`: the epoch whose lr is set now."""
        return self.current_epoch

    @last_epoch.setter
    def last_epoch(self, epoch: int) -> None:
        self.current_epoch = epoch

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        raise NotImplementedError(f"{type(self).__name__}: define lr_at(base_lr, epoch, group) "
                                  "or get_lr()")

    def get_lr(self) -> list[float]:
        """Every param group's lr at `current_epoch`."""
        return [self.lr_at(base, self.current_epoch, i) for i, base in enumerate(self.base_lrs)]

    def step(self, epoch: int | None = None) -> None:
        """Advance to the next epoch (or to `epoch`) and set each group's lr."""
        self.current_epoch = self.current_epoch + 1 if epoch is None else int(epoch)
        for g, lr in zip(self.optimizer.param_groups, self.get_lr()):
            g["lr"] = lr

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in self._unsaved and not k.startswith("_")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict()` of this schedule, MegEngine's or PyTorch's (its private
        bookkeeping, `_step_count` and the like, is left out)."""
        state = {k: v for k, v in state.items() if not k.startswith("_")}
        if "last_epoch" in state:
            state.setdefault("current_epoch", state.pop("last_epoch"))
        self.__dict__.update(state)


class StepLR(LRScheduler):
    """lr = base * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1,
                 current_epoch: int | None = None):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803  (PyTorch's name)
                 last_epoch: int = -1,
                 current_epoch: int | None = None):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        cos = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return self.eta_min + (base_lr - self.eta_min) * cos


class LambdaLR(LRScheduler):
    """lr = base * lr_lambda(epoch); one function, or one per param group."""

    def __init__(self, optimizer: Optimizer,
                 lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1,
                 current_epoch: int | None = None):
        n = len(optimizer.param_groups)
        self.lr_lambdas = [lr_lambda] * n if callable(lr_lambda) else list(lr_lambda)
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} functions for {n} param groups")
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        return base_lr * self.lr_lambdas[group](epoch)


class ExponentialLR(LRScheduler):
    """lr = base * gamma ** epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1,
                 current_epoch: int | None = None):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        return base_lr * self.gamma**epoch


class LinearLR(LRScheduler):
    """PyTorch's warm-up: lr = base * factor, the factor going linearly from `start_factor` to
    `end_factor` over `total_iters` epochs, then staying there."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1,
                 current_epoch: int | None = None):
        require(0 < start_factor <= 1, "LinearLR", "start_factor", start_factor, "in (0, 1]")
        require(0 <= end_factor <= 1, "LinearLR", "end_factor", end_factor, "in [0, 1]")
        require(total_iters > 0, "LinearLR", "total_iters", total_iters, "> 0")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        done = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class LinearWarmup(LRScheduler):
    """Warm-up in front of a schedule: at epoch e < `warmup_steps` the lr that `scheduler`
    sets is multiplied by start_factor + (1 - start_factor) * e / warmup_steps; afterwards it is
    the schedule's own. The schedule keeps counting from the start of training (milestones stay
    where they were), as Detectron2-style warm-up does. Given an optimizer instead of a
    scheduler, it warms up to the constant base lr. Step only the warm-up, not the wrapped
    schedule.

    >>> import eager as eg, eager.optimizer as optim
    >>> opt = optim.SGD([eg.Parameter([1.0])], lr=1.0)
    >>> sched = optim.LinearWarmup(optim.MultiStepLR(opt, [3]), warmup_steps=2, start_factor=0.5)
    >>> [sched.get_last_lr()[0]] + [sched.step() or sched.get_last_lr()[0] for _ in range(3)]
    [0.5, 0.75, 1.0, 0.1]
    """

    _unsaved = ("optimizer", "scheduler")

    def __init__(self, scheduler: LRScheduler | Optimizer, warmup_steps: int,
                 start_factor: float = 1e-3, last_epoch: int = -1,
                 current_epoch: int | None = None):
        require(warmup_steps >= 0, "LinearWarmup", "warmup_steps", warmup_steps, ">= 0")
        require(0 <= start_factor <= 1, "LinearWarmup", "start_factor", start_factor,
                "in [0, 1]")
        inner = scheduler if isinstance(scheduler, LRScheduler) else None
        self.scheduler = inner
        self.warmup_steps, self.start_factor = warmup_steps, start_factor
        super().__init__(scheduler.optimizer if isinstance(scheduler, LRScheduler) else scheduler,
                         last_epoch, current_epoch)

    def factor(self, epoch: int) -> float:
        if epoch >= self.warmup_steps:
            return 1.0
        return self.start_factor + (1 - self.start_factor) * epoch / self.warmup_steps

    def step(self, epoch: int | None = None) -> None:
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self.scheduler is not None:
            self.scheduler.step(self.last_epoch)
        else:
            for g, base in zip(self.optimizer.param_groups, self.base_lrs):
                g["lr"] = base
        f = self.factor(self.last_epoch)
        if f != 1.0:
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * f

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        inner = state.pop("scheduler", None)
        if inner is not None and self.scheduler is not None:
            self.scheduler.load_state_dict(inner)
        super().load_state_dict(state)


def _per_group(name: str, value: float | Sequence[float], n: int) -> list[float]:
    """One value per param group: a number for all, or a list or tuple of n."""
    if isinstance(value, Sequence):
        if len(value) != n:
            raise OpArgumentError(f"OneCycleLR: {name} has {len(value)} values for {n} param "
                                  "groups; give one number or one per group")
        return [float(v) for v in value]
    return [float(value)] * n


class OneCycleLR(LRScheduler):
    """The 1cycle policy (PyTorch semantics): lr rises from max_lr / div_factor to `max_lr`
    over the first `pct_start` of `total_steps` (or `epochs * steps_per_epoch`) steps, then
    anneals to max_lr / div_factor / final_div_factor by the last step, along a cosine or a
    line. `three_phase` comes back down to the initial lr before the final anneal. With
    `cycle_momentum`, the optimizer's `momentum` (or first beta) moves the opposite way between
    `max_momentum` and `base_momentum`. Step it once per batch.
    """

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float],
                 total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | Sequence[float] = 0.85,
                 max_momentum: float | Sequence[float] = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1,
                 current_epoch: int | None = None):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise OpArgumentError("OneCycleLR: give total_steps, or epochs and "
                                      "steps_per_epoch")
            total_steps = epochs * steps_per_epoch
        require(isinstance(total_steps, int) and total_steps > 0, "OneCycleLR", "total_steps",
                total_steps, "an int > 0")
        require(0 <= pct_start <= 1, "OneCycleLR", "pct_start", pct_start, "in [0, 1]")
        require(anneal_strategy in ("cos", "linear"), "OneCycleLR", "anneal_strategy",
                anneal_strategy, "'cos' or 'linear'")
        groups = optimizer.param_groups
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        self.max_lrs = _per_group("max_lr", max_lr, len(groups))
        self.div_factor, self.final_div_factor = div_factor, final_div_factor
        up = pct_start * total_steps
        self.ends = ([up - 1, 2 * up - 2, total_steps - 1] if three_phase
                     else [up - 1, total_steps - 1])
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if not all("momentum" in g or "betas" in g for g in groups):
                raise OpArgumentError(f"OneCycleLR: {type(optimizer).__name__} has neither "
                                      "momentum nor betas to cycle; pass cycle_momentum=False")
            self.momenta = list(zip(_per_group("base_momentum", base_momentum, len(groups)),
                                    _per_group("max_momentum", max_momentum, len(groups))))
        if last_epoch == -1:  # the lr the cycle starts from is the schedule's base lr
            for g, top in zip(groups, self.max_lrs):
                g["initial_lr"] = top / div_factor
        super().__init__(optimizer, last_epoch, current_epoch)

    def _anneal(self, epoch: int, points: list[float]) -> float:
        """The value at `epoch` on the phases from points[i] to points[i + 1]."""
        if epoch > self.total_steps:
            raise OpArgumentError(f"OneCycleLR: stepped to {epoch}, past total_steps="
                                  f"{self.total_steps}; make total_steps the number of "
                                  "optimizer steps in training")
        start = 0.0
        for i, end in enumerate(self.ends):
            if epoch <= end or i == len(self.ends) - 1:
                pct = (epoch - start) / (end - start) if end > start else 1.0
                a, b = points[i], points[i + 1]
                if self.anneal_strategy == "linear":
                    return a + (b - a) * pct
                return b + (a - b) * (1 + math.cos(math.pi * pct)) / 2
            start = end
        raise AssertionError("unreachable")

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        top = self.max_lrs[group]
        low = top / self.div_factor
        points = [low, top, low] if len(self.ends) == 3 else [low, top]
        return self._anneal(epoch, [*points, low / self.final_div_factor])

    def step(self, epoch: int | None = None) -> None:
        super().step(epoch)
        if not self.cycle_momentum:
            return
        for g, (base, top) in zip(self.optimizer.param_groups, self.momenta):
            points = [top, base, top, top] if len(self.ends) == 3 else [top, base, top]
            m = self._anneal(self.last_epoch, points)
            if "betas" in g:
                g["betas"] = (m, *g["betas"][1:])
            else:
                g["momentum"] = m


class MultiStepLR(LRScheduler):
    """lr = base * gamma ** (number of milestones <= epoch)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1,
                 current_epoch: int | None = None):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch, current_epoch)

    def lr_at(self, base_lr: float, epoch: int, group: int) -> float:
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


# Here with the other schedules, as PyTorch's `lr_scheduler` has it; MegEngine's home of it is
# `multi_step_lr` (which re-exports it), and that is where pickles and reprs name it.
MultiStepLR.__module__ = "eager.optimizer.multi_step_lr"


__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "CosineAnnealingLR", "LambdaLR",
           "ExponentialLR", "LinearLR", "LinearWarmup", "OneCycleLR"]
