"""A data-parallel-style training run that a scheduler preempts: `python -m
tests.distributed.preempted DIR` launches 2 ranks that train until a SIGTERM and save a
checkpoint each in `finally:`, the usual pattern. The test sends the SIGTERM to this process
only, as Kubernetes does to a pod's first process; the launcher passes it on to the ranks."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np

import eager as eg
import eager.distributed as dist
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager


def on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second SIGTERM must not cut the save short
    raise SystemExit(128 + signum)


@dist.launcher(n_gpus=2, term_grace=60)
def train_until_sigterm(directory: str) -> int:
    signal.signal(signal.SIGTERM, on_sigterm)
    r = dist.get_rank()
    net = M.Sequential(M.Linear(4, 8), M.ReLU(), M.Linear(8, 2))
    opt = optim.Adam(net.parameters(), lr=1e-2)
    gm = GradManager().attach(net.parameters())
    x = eg.tensor(np.random.default_rng(r).standard_normal((16, 4)).astype(np.float32))
    y = eg.tensor(np.arange(16, dtype=np.int32) % 2)
    steps = 0
    try:
        while True:
            with gm:
                gm.backward(F.cross_entropy(net(x), y))
            opt.step().clear_grad()
            steps += 1
            if steps == 3:  # compiled and running: the test may send its SIGTERM
                Path(directory, f"ready{r}").write_text(str(os.getpid()))
    finally:
        eg.save({"steps": steps, "model": net.state_dict(), "optimizer": opt.state_dict()},
                os.path.join(directory, f"rank{r}.pkl"))


if __name__ == "__main__":
    train_until_sigterm(sys.argv[1])
