"""A stateful property test of the compile cache and its guards.

Two worlds are built from the same seed and driven by the same rule sequence: one runs eagerly,
the other compiled, either as a `partial_trace` backbone region under a GradManager with the loss
and the optimizer step eager (`PartialMachine`), or as a whole `xla_trace` training step
(`XlaMachine`). Between calls the rules mutate both worlds identically in the ways that have
fooled the cache before: module attributes replaced (a buffer tensor, an `np.float32` scale, a
Python int/float/bool the forward reads, an activation lambda), objects dropped and created with
`gc.collect()` so that ids get reused, optimizer slots replaced, parameters attached late,
learning-rate changes and train/eval switches. Every call compares everything a user can
observe: outputs, `.grad` (None-ness included), parameters, buffers, optimizer state, the
learning rate and the RNG key, with the differential harness's `snapshot` and
`assert_states_close` (`differential.py`).

A failure names the quantity that differed and lists the rules the example ran before it
(hypothesis also prints the shrunk sequence when the failure replays). Captures are the cost:
rules that may select another specialization are rationed per example (`can_change`), so the
two tests run up to 2,900 steps; under the default hypothesis profile, deterministically.
"""

from __future__ import annotations

import functools as ft
import gc

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager
from partial import partial_trace, xla_trace
from tests.helpers import examples, labelled_batch

from .differential import World, assert_states_close, snapshot

# Long runs (stateful machines over thousands of steps, launches of several processes): the
# README's test command leaves them out (-m "not slow"), .ci/run runs them too.
pytestmark = pytest.mark.slow

# Batch sizes: few, so that entries are reused; not 1 (BatchNorm's unbiased variance is
# NaN) nor 2 (BatchNorm's output is then +-1 and its input gradient round-off, which Adam
# amplifies to +-lr).
BATCHES = (3, 5)
FLOATS = (0.5, 1.0)  # the Python float argument of the forward
SCALES = (2.0, 0.5, 1.0)  # np.float32 attribute values (the first, simplest, is not 1.0)
SHIFT_SHAPES = ((8,), (1, 8))
SHIFT_VALUES = (0.1, -0.2, 0.0)
ACTIVATIONS = ("tanh", "leaky", "relu")  # the first, simplest, is not the initial one
LRS = (0.01, 0.05, 0.1)
# (attribute, new value) of the Python values the forward reads; each first pair changes the
# initial value.
PYTHON_ATTRIBUTES = (("alpha", 0.5), ("power", 2), ("use_shift", False), ("drop_prob", 0.25),
                     ("alpha", 1.5), ("alpha", 1.0), ("power", 1), ("use_shift", True),
                     ("drop_prob", 0.0))
# The comparison's tolerance (every call starts from equal states, see PartialMachine._call).
RTOL = ATOL = 2e-5
SEED = 3
CAPTURES = 4  # per example, see PartialMachine.can_change
ROUND = 2  # limited rules between two calls, see PartialMachine.can_change

# The state-machine steps run per machine, and per rule (counted, so the test can say it ran
# enough).
STEPS: dict[str, int] = {}
RULES: dict[str, dict[str, int]] = {}


def _activation(kind: str):
    """A NEW function object on every call: replacing `net.act` frees the old one, whose id
    the next new lambda may take (guards keyed by id() then took the new lambda for the old
    one)."""
    if kind == "relu":
        return lambda t: F.relu(t)
    if kind == "tanh":
        return lambda t: F.tanh(t)
    return lambda t: F.leaky_relu(t, 0.1)


class Net(M.Module):
    """A tiny MLP whose forward reads every kind of attribute the rules replace."""

    def __init__(self) -> None:
        super().__init__()
        # No bias before BatchNorm: in training mode its gradient is zero up to round-off,
        # which Adam would amplify to +-lr differently in the two worlds.
        self.fc1 = M.Linear(4, 8, bias=False)
        self.bn = M.BatchNorm1d(8)
        # Draws from the RNG in training mode once a rule sets drop_prob > 0 (it starts at 0
        # because XLA takes ~0.4 s to compile the random-bits generator on CPU).
        self.drop = M.Dropout(0.0)
        self.fc2 = M.Linear(8, 3)
        self.head = M.Linear(8, 2)  # an auxiliary output the loss may ignore
        self.shift = eg.zeros((8,))  # a buffer
        self.scale = np.float32(1.0)  # a numpy scalar
        self.alpha = 1.0  # Python float
        self.power = 1  # Python int: how often the activation is applied
        self.use_shift = True  # Python bool
        self.act = _activation("relu")  # a callable

    def forward(self, x, tmp, c):
        h = self.bn(self.fc1(x))
        if self.use_shift:
            h = h + self.shift
        for _ in range(self.power):
            h = self.act(h)
        h = self.drop(h) * self.scale * self.alpha
        out = self.fc2(h) * c
        if tmp is not None:  # a temporary module passed as an argument
            out = out + tmp(out)
        return out, self.head(h)


def _body(net, x, tmp, c):
    return net(x, tmp, c)


def _tmp_module(seed: int) -> M.Module:
    tmp = M.Linear(3, 3)
    rng = np.random.default_rng(seed)
    tmp.load_state_dict({"weight": rng.standard_normal((3, 3)).astype(np.float32) * 0.3,
                         "bias": rng.standard_normal(3).astype(np.float32) * 0.1})
    return tmp


class Trainer:
    """One model, optimizer and GradManager, and its step, eager or compiled."""

    def __init__(self, mode: str, compiled: bool, optimizer: str):
        self.mode, self.compiled = mode, compiled
        eg.random.seed(SEED)
        self.net = Net()
        self.names = [n for n, _ in self.net.named_parameters()]
        self.params = self.net.parameters()
        if optimizer == "sgd":
            self.opt = optim.SGD(self.params, lr=0.05, momentum=0.9)
        else:
            self.opt = optim.Adam(self.params, lr=0.01)
        # fc2.bias and head.bias start unattached; a rule attaches them later. head.weight is
        # attached: it gets no gradient (None, as in eager code) when the loss ignores the aux
        # output.
        self.unattached = ["fc2.bias", "head.bias"]
        by_name = dict(self.net.named_parameters())
        self.gm = GradManager().attach([by_name[n] for n in self.names
                                        if n not in self.unattached])
        self.tmp: M.Module | None = None
        self.kept: list = []  # replaced tensors kept alive
        if mode == "partial":
            self.fn = partial_trace(_body) if compiled else _body
        else:
            self.fn = xla_trace(self._train_step) if compiled else self._train_step
        if compiled:
            # A new wrapper of `_body` shares the entries of the earlier examples' wrappers
            # (wrappers of the same code share one cache); dropping them keeps hypothesis's
            # examples independent, so that a failure replays and shrinks.
            self.fn.cache_clear()

    def _loss(self, out, aux, y, use_aux):
        loss = F.cross_entropy(out, y)
        if use_aux:
            loss = loss + (aux ** 2).mean()
        return loss

    def _train_step(self, net, x, y, tmp, c, use_aux):
        with self.gm:
            out, aux = net(x, tmp, c)
            loss = self._loss(out, aux, y, use_aux)
            self.gm.backward(loss)
        grads = [p.grad for p in self.params]
        self.opt.step().clear_grad()
        return loss, out, aux, grads

    def step(self, n: int, k: int, c: float, use_aux: bool, seed: int) -> dict:
        """One training step on batch (n, k); returns everything to compare, by name."""
        x, y = labelled_batch((n, k), (n, 4), classes=3)
        eg.random.seed(seed)  # both worlds start the step from the same key
        seen: dict = {}
        if self.mode == "partial":
            with self.gm:
                res = self.fn(self.net, x, self.tmp, c)
                seen["region output type"] = type(res).__name__
                out, aux = res
                loss = self._loss(out, aux, y, use_aux)
                self.gm.backward(loss)
            grads = [p.grad for p in self.params]
            self.opt.step().clear_grad()
        else:
            res = self.fn(self.net, x, y, self.tmp, c, use_aux)
            seen["step output type"] = f"{type(res).__name__} with {type(res[3]).__name__}"
            loss, out, aux, grads = res
        seen.update({"loss": loss.numpy(), "output": out.numpy(), "aux output": aux.numpy()})
        for name, g in zip(self.names, grads):
            seen[f"{name}.grad in the step"] = None if g is None else g.numpy()
        return seen | self.state()

    def state(self) -> dict:
        """The harness's snapshot (parameters, `.grad`, buffers, optimizer state, RNG key) and
        the learning rate."""
        world = World(self.step, modules=[self.net], optimizers=[self.opt])
        return snapshot(world) | {"lr": self.opt.param_groups[0]["lr"]}

    def captures(self) -> int:
        return self.fn.cache_info().captures


def counted(f):
    """Count the rule as one state-machine step of its machine, and log it: a failure message
    lists the rules run so far, which stays readable when hypothesis cannot replay a failure
    (a stale entry found through id() reuse depends on the memory layout of the process)."""
    @ft.wraps(f)
    def wrapper(self, **kwargs):
        STEPS[self.MODE] = STEPS.get(self.MODE, 0) + 1
        rules = RULES.setdefault(self.MODE, {})
        rules[f.__name__] = rules.get(f.__name__, 0) + 1
        if f.__name__ == "build":
            self.log = []
        self.log.append(f"{f.__name__}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})")
        return f(self, **kwargs)
    return wrapper


class PartialMachine(RuleBasedStateMachine):
    """The `partial_trace` world: a backbone region, eager loss and optimizer step."""

    MODE = "partial"

    # The starting configuration is drawn too: each example covers it without spending
    # limited rules (see can_change).
    @initialize(optimizer=st.sampled_from(["sgd", "adam"]), use_aux=st.booleans(),
                eval_mode=st.booleans(), tmp=st.one_of(st.none(), st.integers(0, 3)))
    @counted
    def build(self, optimizer, use_aux, eval_mode, tmp):
        # Freeze what earlier examples left, so that the rules' `gc.collect()` calls scan only
        # the objects of this example (0.1 s -> 0.1 ms each); `_run` unfreezes at the end.
        gc.collect()
        gc.freeze()
        self.worlds = [Trainer(self.MODE, False, optimizer), Trainer(self.MODE, True, optimizer)]
        for w in self.worlds:
            w.net.train(not eval_mode)
            w.tmp = None if tmp is None else _tmp_module(tmp)
        self.calls = 0
        # Not the simplest values of the rules that change them, so that hypothesis's
        # preferred (simplest) choices change something.
        self.n, self.c, self.use_aux = BATCHES[1], FLOATS[1], use_aux
        # Whether something the compiled code may legitimately depend on changed since the
        # last call; when not, the call must be a cache hit.
        self.changed = True
        self.pending = 0  # limited rules run since the last call
        self.rounds = 0  # calls that followed a change

    def can_change(self) -> bool:
        """Whether a rule that may select another compiled specialization can run.

        Captures cost 0.25-0.6 s each and cached calls milliseconds, so such rules run only
        until CAPTURES calls in this example followed a change (each may capture once), and
        at most ROUND of them between two calls (a round of one or two changes is what
        provokes a stale entry; more just recapture). The rules whose effect must not
        recapture (float argument, lr, equal np.float32, garbage) are never limited. (Counted
        by the test, not by `cache_info()`, so that what hypothesis draws does not depend on
        the code under test.)"""
        return self.pending < ROUND and self.rounds < CAPTURES

    def mutate(self, f, changes: bool = True, limited: bool = True) -> None:
        """Apply `f` to both worlds, then collect garbage. `changes`: whether this may
        legitimately cause a capture; `limited`: whether the rule counts against
        `can_change`."""
        for w in self.worlds:
            f(w)
        gc.collect()
        self.changed |= changes
        self.pending += limited

    # ----- calls -------------------------------------------------------------------------
    def _call(self) -> None:
        eager, compiled = self.worlds
        self.calls += 1
        before = compiled.captures()
        args = (self.n, self.calls % 4, self.c, self.use_aux, 1000 + self.calls)
        want = eager.step(*args)
        got = compiled.step(*args)
        where = (f"after {'; '.join(self.log[-40:])}\ncall {self.calls} ({self.MODE}, batch "
                 f"{self.n}, c={self.c}, use_aux={self.use_aux})")
        assert_states_close(got, want, RTOL, ATOL, where)
        # Training this model is chaotic (a 1e-7 change of the eager model's parameters grows
        # to 1e-2 in 120 SGD steps), so round-off would add up over an example: after each
        # comparison the compiled world takes the eager one's values (the same tensors,
        # rebound, as a checkpoint load does), and every call starts from equal states.
        compiled.net.load_state_dict(eager.net.state_dict())
        compiled.opt.load_state_dict(eager.opt.state_dict())
        if not self.changed:
            assert compiled.captures() == before, (
                f"{where}: captured anew although nothing the compiled code depends on "
                "changed since the last call (at most a float argument, lr, an equal "
                "np.float32, garbage or gc)")
        self.rounds += self.changed
        self.changed = False
        self.pending = 0

    # Two rules without arguments (hypothesis picks those most often), so that an example
    # rarely has none enabled (hypothesis enables a random subset of rules per example).
    @rule()
    @counted
    def call(self):
        self._call()

    @rule()
    @counted
    def call_twice(self):
        self._call()
        self._call()  # nothing changed: a cache hit

    @precondition(can_change)
    @rule(n=st.sampled_from(BATCHES))
    @counted
    def set_batch(self, n):
        self.mutate(lambda w: None, n != self.n)
        self.n = n

    @rule(c=st.sampled_from(FLOATS))
    @counted
    def set_float_argument(self, c):
        # A Python float argument is traced as an input: no recapture.
        self.c = c

    @precondition(can_change)
    @rule(v=st.booleans())
    @counted
    def set_use_aux(self, v):
        # In the xla_trace step a bool argument (static); in the partial world the eager loss
        # then ignores the region's second output.
        self.mutate(lambda w: None, v != self.use_aux)
        self.use_aux = v

    # ----- module attributes -------------------------------------------------------------
    @precondition(can_change)
    @rule(buffers=st.lists(st.tuples(st.sampled_from(SHIFT_SHAPES), st.sampled_from(SHIFT_VALUES)),
                           min_size=1, max_size=2), make_new_first=st.booleans())
    @counted
    def replace_buffer(self, buffers, make_new_first):
        def f(w):  # reusing ids as in replace_activation
            for shape, v in buffers:
                if not make_new_first:
                    w.net.shift = None
                w.net.shift = eg.tensor(np.full(shape, v, np.float32))
        self.mutate(f)

    @precondition(can_change)
    @rule(values=st.lists(st.sampled_from(SCALES), min_size=1, max_size=3),
          make_new_first=st.booleans())
    @counted
    def replace_scale(self, values, make_new_first):
        def f(w):  # reusing ids as in replace_activation
            for v in values:
                if not make_new_first:
                    w.net.scale = None
                w.net.scale = np.float32(v)
        # An equal np.float32 is an equal plain value: no recapture.
        self.mutate(f, float(self.worlds[0].net.scale) != values[-1])

    @rule()
    @counted
    def replace_scale_by_an_equal_one(self):
        def f(w):
            w.net.scale = np.float32(float(w.net.scale))
        self.mutate(f, changes=False, limited=False)

    @precondition(can_change)
    @rule(change=st.sampled_from(PYTHON_ATTRIBUTES))
    @counted
    def set_python_attribute(self, change):
        # Plain Python values the forward reads (`drop_prob` is the Dropout sub-module's):
        # guarded by value.
        name, v = change

        def f(w):
            setattr(w.net.drop if name == "drop_prob" else w.net, name, v)
        owner = self.worlds[0].net.drop if name == "drop_prob" else self.worlds[0].net
        self.mutate(f, getattr(owner, name) != v)

    @precondition(can_change)
    @rule(kinds=st.lists(st.sampled_from(ACTIVATIONS), min_size=1, max_size=3),
          make_new_first=st.booleans())
    @counted
    def replace_activation(self, kinds, make_new_first):
        # A new lambda made after the old one is freed (`not make_new_first`) takes its id;
        # replaced twice in a row, the second takes the id of the one before the last.
        def f(w):
            for kind in kinds:
                if not make_new_first:
                    w.net.act = None
                w.net.act = _activation(kind)
        self.mutate(f)  # a new callable recaptures: callables are guarded by identity

    @precondition(can_change)
    @rule(training=st.booleans())
    @counted
    def train_or_eval(self, training):
        self.mutate(lambda w: w.net.train(training), self.worlds[0].net.training != training)

    # ----- objects dropped and created -----------------------------------------------------
    @precondition(can_change)
    @rule(seed=st.integers(0, 3))
    @counted
    def new_temporary_module(self, seed):
        def f(w):  # the old one is freed first: the new one may take its id
            w.tmp = None
            gc.collect()
            w.tmp = _tmp_module(seed)
        self.mutate(f)

    @precondition(can_change)
    @rule()
    @counted
    def drop_temporary_module(self):
        def f(w):
            w.tmp = None
        self.mutate(f, self.worlds[0].tmp is not None)

    @rule(count=st.integers(1, 12), kind=st.sampled_from(["tensor", "scalar", "lambda",
                                                            "module"]))
    @counted
    def garbage(self, count, kind):
        # Objects made and freed at once: the next new objects of their size reuse their ids.
        make = {"tensor": lambda i: eg.zeros((8,)) + i, "scalar": lambda i: np.float32(i),
                "lambda": lambda i: _activation(ACTIVATIONS[i % 3]),
                "module": lambda i: _tmp_module(i)}[kind]
        junk = [make(i) for i in range(count)]
        del junk
        gc.collect()

    # ----- optimizer and GradManager -------------------------------------------------------
    @precondition(lambda self: self.MODE == "partial" or self.can_change())
    @rule(i=st.integers(0, 9), slot=st.sampled_from(["momentum_buffer", "exp_avg",
                                                      "exp_avg_sq"]), free_old=st.booleans(),
          later=st.booleans())
    @counted
    def replace_optimizer_slot(self, i, slot, free_old, later):
        def f(w):
            p = w.params[i % len(w.params)]
            state = w.opt.state[p]
            key = slot if slot in state else next(k for k in state if k != "step")
            if not free_old:  # the old tensor stays alive (as if a checkpoint held it)
                w.kept.append(state[key])
            # Adam's second moment gets a new tensor of the same value: zeroing it would make
            # the next update divide by ~|grad| and amplify round-off to lr-sized steps.
            state[key] = eg.tensor(state[key].numpy()) if key == "exp_avg_sq" else \
                eg.zeros_like(p)
        # The partial world's optimizer runs eagerly, outside the region.
        compiled_state = self.MODE != "partial"
        self.mutate(f, changes=compiled_state, limited=compiled_state)
        if not later:
            # Called at once: any module attribute set in between (most rules set one) makes
            # the cache re-check everything, which hides a stale optimizer slot.
            self._call()

    @precondition(lambda self: self.worlds[0].unattached and self.can_change())
    @rule(i=st.integers(0, 1))
    @counted
    def attach(self, i):
        def f(w):
            name = w.unattached.pop(i % len(w.unattached))
            w.gm.attach([dict(w.net.named_parameters())[name]])
        self.mutate(f)

    @rule(lr=st.sampled_from(LRS))
    @counted
    def set_lr(self, lr):
        # Hyper-parameters are inputs: a new value takes effect without recompiling.
        def f(w):
            w.opt.param_groups[0]["lr"] = lr
        self.mutate(f, changes=False, limited=False)


class XlaMachine(PartialMachine):
    MODE = "xla"


def _settings(count: int, steps: int) -> settings:
    # No database: whether a stale entry shows depends on the memory layout of the process, so a
    # stored failure need not replay (the failure message lists the rules run instead).
    return settings(examples(count), stateful_step_count=steps, database=None,
                    suppress_health_check=list(HealthCheck))


# Examples, and steps per example, of each machine. An example runs at most CAPTURES + 1
# captures (0.25 s each for a partial_trace region, 0.6 s for an xla_trace step on a loaded
# 2-core machine) and then cheap cached calls; each machine runs more than 1,000 steps.
SETTINGS = {"partial": _settings(16, 90), "xla": _settings(12, 120)}


def _run(machine) -> None:
    STEPS[machine.MODE] = 0
    RULES[machine.MODE] = {}
    try:
        run_state_machine_as_test(machine, settings=SETTINGS[machine.MODE])
    finally:
        gc.unfreeze()
    assert STEPS[machine.MODE] >= 1000, (STEPS, RULES)


def test_partial_trace_region_matches_eager_under_mutations():
    _run(PartialMachine)


def test_xla_trace_step_matches_eager_under_mutations():
    _run(XlaMachine)
