"""What goes wrong in worker processes: an exception (re-raised as itself, with the worker's
traceback as its cause), a hang past `timeout`, a killed or exiting worker, a batch that cannot
be sent back, `break`, Ctrl-C. After each, no worker process and no shared memory is left."""

from __future__ import annotations

import gc
import os
import signal
import time

import numpy as np
import pytest

from eager.data import (
    Collator,
    DataLoader,
    DataLoaderError,
    DataLoaderTimeoutError,
    Dataset,
    SequentialSampler,
    WorkerTraceback,
)


class Faulty(Dataset):
    """Sample `bad` misbehaves as `mode` says; every sample carries its worker's pid."""

    def __init__(self, mode: str, bad: int = 9, n: int = 24) -> None:
        self.mode, self.bad, self.n = mode, bad, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.bad:
            misbehave(self.mode, i)
        return np.full(3, i, np.float32), os.getpid()


def misbehave(mode: str, i: int) -> None:
    if mode == "raise":
        raise KeyError(f"sample {i} is missing")
    if mode == "hang":
        time.sleep(120)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "exit":
        os._exit(3)


def shared_dirs() -> set[str]:
    prefix = f"eager-data-{os.getpid()}-"
    return {d for d in os.listdir("/dev/shm") if d.startswith(prefix)} \
        if os.path.isdir("/dev/shm") else set()


def alive(pids: set[int]) -> list[int]:
    """Those of `pids` still running (reaped children do not exist any more)."""
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        out.append(pid)
    return out


def run(loader: DataLoader, pids: set[int], stop_after: int | None = None) -> None:
    for n, (_, batch_pids) in enumerate(loader, 1):
        pids.update(batch_pids.tolist())
        if n == stop_after:
            break


@pytest.fixture
def no_leftovers():
    gc.collect()  # loaders of earlier tests in this process, dropped but not yet collected
    before = shared_dirs()
    pids: set[int] = set()
    yield pids
    gc.collect()
    assert alive(pids - {os.getpid()}) == []
    assert shared_dirs() - before == set()


def loader(mode: str, **kwargs) -> DataLoader:
    data = Faulty(mode)
    return DataLoader(data, SequentialSampler(data, 4), num_workers=2, **kwargs)


@pytest.mark.parametrize("preload", [False, True])
def test_a_worker_exception_is_raised_as_itself_with_the_workers_traceback(no_leftovers,
                                                                          preload):
    with pytest.raises(KeyError, match="sample 9 is missing") as caught:
        run(loader("raise", preload=preload), no_leftovers)
    cause = caught.value.__cause__
    assert isinstance(cause, WorkerTraceback)
    assert "in misbehave" in cause.text and "DataLoader worker" in cause.text


def test_a_hang_past_the_timeout_names_the_worker_and_the_batch(no_leftovers):
    start = time.monotonic()
    with pytest.raises(DataLoaderTimeoutError, match=r"worker 0 \(pid \d+\).*indices \[8, 9"):
        run(loader("hang", timeout=1.5), no_leftovers)
    assert time.monotonic() - start < 20  # the hung worker was terminated, not waited for


@pytest.mark.parametrize("mode, how", [("kill", "killed by SIGKILL"), ("exit", "exit code 3")])
def test_a_dead_worker_is_named(no_leftovers, mode, how):
    with pytest.raises(DataLoaderError, match=rf"worker 0 \(pid \d+, {how}"):
        run(loader(mode), no_leftovers)


def test_a_batch_that_cannot_be_sent_back_is_an_error_not_a_hang(no_leftovers):
    class Local:  # defined in a function: does not pickle
        pass

    class Unsendable(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return Local()

    class AsIs(Collator):
        def apply(self, inputs):
            return list(inputs)

    data = Unsendable()
    with pytest.raises(DataLoaderError, match="cannot send back.*module level"):
        next(iter(DataLoader(data, SequentialSampler(data, 2), collator=AsIs(), num_workers=1)))


@pytest.mark.parametrize("stop_after, preload", [(1, False), (3, False), (1, True), (3, True)])
def test_break_stops_the_workers(no_leftovers, stop_after, preload):
    run(loader("none", preload=preload), no_leftovers, stop_after=stop_after)


def test_an_exception_in_the_loop_body_stops_the_workers(no_leftovers):
    with pytest.raises(ZeroDivisionError):
        for _, batch_pids in loader("none"):
            no_leftovers.update(batch_pids.tolist())
            1 / 0  # noqa: B018 - the user's step raising


@pytest.fixture
def python_ctrl_c():
    """SIGINT raising KeyboardInterrupt, as Python sets it up in a terminal; a process started
    in the background by a shell without job control (`cmd &` in a script, as CI runners may)
    inherits SIGINT ignored, and Python then leaves it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("preload", [False, True])
def test_ctrl_c_in_the_loop_stops_the_workers(no_leftovers, python_ctrl_c, preload):
    with pytest.raises(KeyboardInterrupt):
        for n, (_, batch_pids) in enumerate(loader("none", preload=preload)):
            no_leftovers.update(batch_pids.tolist())
            if n == 1:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises here


def test_workers_ignore_a_sigint_of_their_own(no_leftovers):
    """A terminal's Ctrl-C reaches the whole process group: the workers leave it to the loop
    (which stops them) instead of dying with a KeyboardInterrupt traceback each."""
    batches = 0
    for _, batch_pids in loader("none"):
        if batches == 0:
            for pid in set(batch_pids.tolist()):
                os.kill(pid, signal.SIGINT)
        no_leftovers.update(batch_pids.tolist())
        batches += 1
    assert batches == 6


def test_an_abandoned_iterator_stops_its_workers_when_collected(no_leftovers):
    it = iter(loader("none"))
    no_leftovers.update(next(it)[1].tolist())
    del it  # garbage collection (the fixture collects) stops them


class HandlerOf(Dataset):
    """Each sample: whether the worker's SIGTERM handler is the system's default."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_workers_do_not_run_the_scripts_signal_handlers(no_leftovers):
    def save_checkpoint(signum, frame):  # what a training script installs
        raise SystemExit(0)

    previous = signal.signal(signal.SIGTERM, save_checkpoint)
    try:
        data = HandlerOf()
        (defaults,) = DataLoader(data, SequentialSampler(data, 2), num_workers=1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert defaults.tolist() == [True, True]
