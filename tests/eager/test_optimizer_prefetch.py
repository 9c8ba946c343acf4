"""An optimizer starts compiling its update program when it is built (`Optimizer._prefetch`),
so the first step's update waits for nothing: the program a step with every trainable
parameter's gradient runs, found on the compile pool, and the step bit-identical to one that
compiled it there and then."""

import numpy as np
import pytest

import eager as eg
import eager.module as M
from eager import optimizer as optim
from eager.autodiff import GradManager
from eager.core.ops import OPS
from eager.core.ops import persistent as P

UPDATES = ("sgd_update", "sgd_plain_update", "adam_update", "adagrad_update",
           "adadelta_update", "lamb_update")

OPTIMIZERS = {
    "sgd momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-4),
    "sgd nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "sgd plain": lambda ps: optim.SGD(ps, lr=0.1),
    "adam": lambda ps: optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adagrad": lambda ps: optim.Adagrad(ps, lr=1e-2),
    "adadelta": lambda ps: optim.Adadelta(ps),
    "lamb": lambda ps: optim.LAMB(ps, lr=1e-2),
    "lamb fp16": lambda ps: optim.LAMBFp16(ps, lr=1e-2),
}


@pytest.fixture
def fresh_updates():
    """The update ops as a new process has them: no program made, started or loaded."""
    for name in UPDATES:
        OPS[name].drop_compiled()
    yield
    for name in UPDATES:
        OPS[name].drop_compiled()


def _model(dtype: str = "float32") -> M.Module:
    eg.random.seed(0)
    net = M.Sequential(M.Conv2d(3, 4, 3, padding=1), M.BatchNorm2d(4, freeze=True), M.ReLU(),
                       M.Conv2d(4, 2, 1), M.BatchNorm2d(2))
    if dtype != "float32":
        for p in net.parameters():
            p._data = p._data.astype(dtype)
    return net


def _steps(name: str, dtype: str = "float32", steps: int = 2) -> tuple[list, list, list]:
    """Build the model and optimizer `name`, train `steps` steps; the programs the update op
    had started and loaded after building, and the parameters after."""
    net = _model(dtype)
    params = list(net.parameters())
    opt = OPTIMIZERS[name](params)
    jitted = [fn for op in UPDATES for fn in OPS[op]._fwd.values()]
    started = [task for fn in jitted if isinstance(fn, P.Persistent)
               for task in (fn.started or {}).values()]
    x = eg.tensor(np.linspace(-1, 1, 2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5))
    gm = GradManager().attach(params)
    for _ in range(steps):
        with gm:
            gm.backward((net(x.astype(dtype)).astype("float32") ** 2).mean())
        opt.step().clear_grad()
    loaded = [program for fn in jitted if isinstance(fn, P.Persistent)
              for program in fn.loaded.values()]
    return started, loaded, [p.numpy() for p in params]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_first_update_runs_the_program_started_when_the_optimizer_was_built(
        name, cache, threads, fresh_updates):
    threads(2)
    dtype = "float16" if name == "lamb fp16" else "float32"
    started, loaded, trained = _steps(name, dtype)
    assert len(started) == 1  # one group: one program, begun on the pool
    assert loaded == [started[0].result()]  # ... and the one both steps ran
    for name_ in UPDATES:
        OPS[name_].drop_compiled()
    threads(1)  # compiled in the step itself: the same parameters, bit for bit
    assert _steps(name, dtype)[0] == []
    serial = _steps(name, dtype)[2]
    for a, b in zip(trained, serial):
        np.testing.assert_array_equal(a, b)


def test_a_frozen_batch_norms_parameters_are_left_out_of_the_guess(cache, threads,
                                                                   fresh_updates):
    """MegEngine's frozen batch norm reads its affine parameters as constants: no gradient,
    so the step updates the others only, and the guess says so."""
    threads(2)
    net = _model()
    frozen = net[1]
    assert frozen.constant_parameters() == [frozen.weight, frozen.bias]
    assert net[4].constant_parameters() == []
    started, loaded, _ = _steps("sgd momentum")
    assert loaded == [started[0].result()]
    frozen.freeze = False  # read at each call, as MegEngine reads it: then it trains
    assert frozen.constant_parameters() == []


def test_a_wrong_guess_costs_a_compile_not_a_result(cache, threads, fresh_updates):
    """A parameter that gets no gradient though it could (unused here): the step compiles the
    program for the parameters it has gradients for, and trains as a serial run does."""
    threads(2)

    def train() -> list:
        eg.random.seed(1)
        used, unused = M.Linear(3, 2), M.Linear(3, 2)
        params = [*used.parameters(), *unused.parameters()]
        opt = optim.SGD(params, lr=0.1, momentum=0.9)
        gm = GradManager().attach(params)
        for _ in range(2):
            with gm:
                gm.backward(used(eg.ones((4, 3))).sum())
            opt.step().clear_grad()
        return [p.numpy() for p in params]

    guessed = train()
    programs = {dict(key)["n"]: fn for key, fn in OPS["sgd_update"]._fwd.items()}
    assert programs[4].started and not programs[4].loaded  # the guess: all four, unused
    assert len(programs[2].loaded) == 1  # the step's own, for the two with gradients
    OPS["sgd_update"].drop_compiled()
    threads(1)
    for a, b in zip(guessed, train()):
        np.testing.assert_array_equal(a, b)


def test_one_compile_thread_starts_nothing(cache, threads, fresh_updates):
    threads(1)
    optim.SGD(list(_model().parameters()), lr=0.1, momentum=0.9)
    assert all(not fn.started for op in UPDATES for fn in OPS[op]._fwd.values()
               if isinstance(fn, P.Persistent))
