"""The main job, for now: train a small classifier eagerly on two interleaved spirals.

Shows the eager framework end to end (modules, GradManager, SGD with momentum, a learning-rate
schedule, BatchNorm, dropout, checkpoints) and prints loss, accuracy and step time.

    python examples/demo.py --steps 300
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager.autodiff import GradManager


def spirals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals in 2-d, with labels 0 and 1."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.25, 1.0, n) * 3 * np.pi
    label = rng.integers(0, 2, n)
    r = t / (3 * np.pi)
    angle = t + np.pi * label
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], 1) + rng.normal(0, 0.02, (n, 2))
    return x.astype(np.float32), label.astype(np.int32)


class Net(M.Module):
    def __init__(self, hidden: int = 64):
        super().__init__()
        self.body = M.Sequential(
            M.Linear(2, hidden), M.BatchNorm1d(hidden), M.ReLU(),
            M.Linear(hidden, hidden), M.ReLU(), M.Dropout(0.1),
        )
        self.head = M.Linear(hidden, 2)

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        return self.head(self.body(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--batch-size", type=int, default=128, help="batch size (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args()

    eg.random.seed(args.seed)
    x_train, y_train = spirals(2048, args.seed)
    x_test, y_test = spirals(512, args.seed + 1)
    net = Net()
    gm = GradManager().attach(net.parameters())
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    rng = np.random.default_rng(args.seed)

    times = []
    for step in range(1, args.steps + 1):
        idx = rng.integers(0, len(x_train), args.batch_size)
        x, y = eg.tensor(x_train[idx]), eg.tensor(y_train[idx])
        start = time.perf_counter()
        with gm:
            loss = F.cross_entropy(net(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        sched.step()
        value = loss.item()
        times.append(time.perf_counter() - start)
        if step % 50 == 0 or step == 1:
            print(f"step {step:4d}  loss {value:.4f}  lr {opt.param_groups[0]['lr']:.4f}")

    net.eval()
    accuracy = (F.argmax(net(eg.tensor(x_test)), 1).numpy() == y_test).mean()
    path = os.path.join(tempfile.mkdtemp(), "demo.ckpt")
    eg.save({"model": net.state_dict(), "opt": opt.state_dict()}, path)
    restored = Net()
    restored.load_state_dict(eg.load(path)["model"])
    restored.eval()
    same = np.allclose(restored(eg.tensor(x_test)).numpy(), net(eg.tensor(x_test)).numpy())
    print(f"test accuracy {accuracy:.3f}; median step {np.median(times[10:]) * 1e3:.2f} ms; "
          f"checkpoint round trip {'ok' if same else 'MISMATCH'}")


if __name__ == "__main__":
    main()
