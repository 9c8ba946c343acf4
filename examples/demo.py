"""Handwritten digits with a compiled backbone and a dynamic head: why mixed execution exists.

The backbone, a small CNN, is static: `partial_trace` compiles its forward and backward. The head
is dynamic and stays eager: online hard example mining (the loss over the samples whose loss is
at or above the batch median, a data-dependent count) and a Python decision on the loss value
(an auxiliary term, added only while the loss is large). `gm.backward(loss)` crosses both.

    python examples/demo.py                    # train (partial_trace), then compare modes
    python examples/demo.py --mode eager       # the same training, op by op
    python examples/demo.py --amp              # mixed precision: float16 (eager.amp)
    python examples/demo.py --help

The data are the 8x8 digits that scikit-learn ships (no download). At the end a table compares
steps per second of the eager step, the partial step (compiled backbone, eager head) and, for a
static variant of the head (plain cross-entropy over the batch), the whole step compiled by
`xla_trace`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.datasets import load_digits
from tqdm import tqdm

import eager as eg
import eager.functional as F
import eager.module as M
import eager.optimizer as optim
from eager import amp
from eager.autodiff import GradManager
from eager.data import ArrayDataset, DataLoader, Infinite, RandomSampler
from partial import partial_trace, xla_trace

CLASSES = 10


@dataclass
class Data:
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def load_data(seed: int, test_fraction: float = 0.2) -> Data:
    """The digits as (N, 1, 8, 8) float32 images, standardized, split into train and test."""
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0 - 0.3)[:, None] / 0.35
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Data(x[train], y[train], x[test], y[test])


class Backbone(M.Module):
    """conv-BN-ReLU x 3 (the second with stride 2), global average pool: 64 features."""

    def __init__(self) -> None:
        super().__init__()
        self.body = M.Sequential(
            M.Conv2d(1, 32, 3, padding=1, bias=False), M.BatchNorm2d(32), M.ReLU(),
            M.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), M.BatchNorm2d(64), M.ReLU(),
            M.Conv2d(64, 64, 3, padding=1, bias=False), M.BatchNorm2d(64), M.ReLU(),
            M.AdaptiveAvgPool2d(1), M.Flatten())

    def forward(self, x: eg.Tensor) -> eg.Tensor:
        return self.body(x)


def hard_example_loss(logits: eg.Tensor, labels: eg.Tensor) -> eg.Tensor:
    """Mean loss over the hard half of the batch, plus a label-smoothing term while it is large.

    Both decisions read values, so this head cannot be compiled once: it runs eagerly.
    """
    per_sample = F.cross_entropy(logits, labels, reduction="none")
    threshold = float(np.median(per_sample.numpy()))
    loss = per_sample[per_sample >= threshold].mean()  # a data-dependent number of samples
    if loss.item() > 0.5:
        loss = loss + 0.5 * F.cross_entropy(logits, labels, label_smooth=0.1)
    return loss


class Model:
    """Backbone, head, optimizer and GradManager, with a training step for each mode; with
    `low_precision` ("float16" or "bfloat16"), mixed precision: the steps and the evaluation run
    under `amp.autocast` and the loss is scaled by an `amp.GradScaler`."""

    def __init__(self, mode: str, lr: float = 0.05, low_precision: str | None = None):
        self.backbone = Backbone()
        self.head = M.Linear(64, CLASSES)
        params = self.backbone.parameters() + self.head.parameters()
        self.opt = optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
        self.gm = GradManager().attach(params)
        self.features = partial_trace(self.backbone) if mode == "partial" else self.backbone
        self.step: Callable[[eg.Tensor, eg.Tensor], eg.Tensor] = (
            xla_trace(self._static_step) if mode == "xla" else self._dynamic_step)
        self.autocast = amp.autocast(low_precision is not None, low_precision or "float16")
        self.scaler = amp.GradScaler() if low_precision else None

    def _backward(self, loss: eg.Tensor) -> None:
        if self.scaler is None:
            self.gm.backward(loss)
        else:
            self.scaler.backward(self.gm, loss)  # skips the step if a gradient overflowed

    def _dynamic_step(self, x: eg.Tensor, y: eg.Tensor) -> eg.Tensor:
        with self.gm, self.autocast:
            loss = hard_example_loss(self.head(self.features(x)), y)
            self._backward(loss)
        self.opt.step().clear_grad()
        return loss

    def _static_step(self, x: eg.Tensor, y: eg.Tensor) -> eg.Tensor:
        """The static variant of the head: label-smoothed cross-entropy over the whole batch."""
        with self.gm, self.autocast:
            loss = F.cross_entropy(self.head(self.features(x)), y, label_smooth=0.1)
            self._backward(loss)
        self.opt.step().clear_grad()
        return loss

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        self.backbone.eval()
        with self.autocast:
            predicted = self.head(self.features(eg.tensor(x))).argmax(axis=1).numpy()
        self.backbone.train()
        return float((predicted == y).mean())


def loader(data: Data, batch_size: int, seed: int, forever: bool = False) -> DataLoader:
    """The training images in shuffled batches, a new order each epoch, as MegEngine loads
    them; `drop_last` keeps every batch full, so shapes stay fixed. `preload=True` makes the
    next batch and copies it to the device while a step runs: batches arrive as Tensors.
    `forever`: one epoch after another, without end."""
    train = ArrayDataset(data.train_x, data.train_y)
    sampler = RandomSampler(train, batch_size, drop_last=True, seed=seed)
    return DataLoader(train, Infinite(sampler) if forever else sampler, preload=True)


def train(data: Data, mode: str, epochs: int, batch_size: int, seed: int,
          low_precision: str | None = None) -> Model:
    """Train in `mode`, with a progress bar and the test accuracy after each epoch."""
    eg.random.seed(seed)
    model = Model(mode, low_precision=low_precision)
    batches = loader(data, batch_size, seed)
    steps = len(batches)
    for epoch in range(1, epochs + 1):
        bar = tqdm(batches, total=steps, desc=f"epoch {epoch}/{epochs}", unit="step",
                   leave=True)
        start, total = time.perf_counter(), 0.0
        for i, (x, y) in enumerate(bar, 1):
            total += model.step(x, y).item()
            rate = i * batch_size / (time.perf_counter() - start)
            bar.set_postfix(loss=f"{total / i:.3f}", samples_per_s=f"{rate:,.0f}")
        bar.close()
        print(f"epoch {epoch}: mean loss {total / steps:.4f}, "
              f"test accuracy {model.accuracy(data.test_x, data.test_y):.3f}")
    return model


def steps_per_second(data: Data, mode: str, batch_size: int, seed: int,
                     warmup: int = 3, timed: int = 20) -> tuple[float, float]:
    """(steps per second after warmup, seconds of the first step) of a fresh model in `mode`."""
    eg.random.seed(seed)
    model = Model(mode)
    stream = iter(loader(data, batch_size, seed, forever=True))
    x, y = next(stream)
    start = time.perf_counter()
    model.step(x, y).item()
    first = time.perf_counter() - start
    for _ in range(warmup):
        model.step(*next(stream)).item()
    times = []
    for _ in range(timed):
        x, y = next(stream)
        start = time.perf_counter()
        model.step(x, y).item()  # reading the loss waits for the step
        times.append(time.perf_counter() - start)
    return 1.0 / float(np.median(times)), first


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Train a digit classifier: a compiled CNN backbone (partial_trace) with a "
                    "dynamic, eager head (hard example mining), then compare the steps per "
                    "second of eager, partial_trace and xla_trace.")
    parser.add_argument("--epochs", type=int, default=4, help="training epochs (default 4)")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    parser.add_argument("--mode", choices=["partial", "eager", "xla"], default="partial",
                        help="partial: compiled backbone, eager dynamic head (default); eager: "
                             "everything op by op; xla: the whole step compiled, with the "
                             "static head")
    parser.add_argument("--seed", type=int, default=0, help="seed of data split, init, order")
    parser.add_argument("--amp", nargs="?", const="float16", choices=["float16", "bfloat16"],
                        help="mixed precision (eager.amp): autocast to float16 (or the type "
                             "given) with a GradScaler")
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the final steps-per-second comparison of the three modes")
    args = parser.parse_args(argv)

    data = load_data(args.seed)
    print(f"digits: {len(data.train_x)} train, {len(data.test_x)} test images of 8x8; "
          f"mode {args.mode}, batch {args.batch_size}"
          + (f", mixed precision ({args.amp})" if args.amp else ""))
    model = train(data, args.mode, args.epochs, args.batch_size, args.seed, args.amp)
    accuracy = model.accuracy(data.test_x, data.test_y)
    print(f"final test accuracy {accuracy:.3f}")
    if args.no_compare:
        return
    print("\nsteps per second (median of 20 steps after 3 warmup steps; first step includes "
          "capture and compilation):\n")
    print("| mode | head | steps/s | first step s |\n| --- | --- | ---: | ---: |")
    for mode, head in [("eager", "dynamic"), ("partial", "dynamic"), ("xla", "static")]:
        rate, first = steps_per_second(data, mode, args.batch_size, args.seed)
        print(f"| {mode} | {head} | {rate:.1f} | {first:.2f} |")


if __name__ == "__main__":
    main()
