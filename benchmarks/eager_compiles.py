"""XLA compiles in the first epoch of the demo with its hard-example (OHEM) head.

Run `python -m benchmarks.eager_compiles [--mode partial|eager] [--epochs N]`. It trains the
demo's model (`examples/demo.py`: compiled or eager backbone, eager dynamic head) for N epochs
and prints, per epoch, the wall time, the number of XLA compiles and the seconds they took
(jax's own `jax.monitoring` compile events: jaxpr tracing, lowering and the backend compile).
The dynamic head makes eager ops see data-dependent shapes, so an epoch without compiles is
the goal after the first; the first epoch shows how much a new shape costs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.compiles import count_compiles
from examples import demo


def above_mean_loss(logits: demo.eg.Tensor, labels: demo.eg.Tensor) -> demo.eg.Tensor:
    """The demo's head with the threshold at the batch's mean loss instead of its median: the
    number of hard examples then changes from batch to batch (the median keeps exactly half of
    an even batch), the case that makes eager ops see a new shape at almost every step."""
    per_sample = demo.F.cross_entropy(logits, labels, reduction="none")
    threshold = float(per_sample.numpy().mean())
    loss = per_sample[per_sample >= threshold].mean()
    if loss.item() > 0.5:
        loss = loss + 0.5 * demo.F.cross_entropy(logits, labels, label_smooth=0.1)
    return loss


HEADS = {"median": demo.hard_example_loss, "mean": above_mean_loss}


def run(mode: str, head: str, epochs: int, batch_size: int, seed: int, top: int) -> None:
    demo.hard_example_loss = HEADS[head]  # the demo's step looks its head up by this name
    data = demo.load_data(seed)
    demo.eg.random.seed(seed)
    model = demo.Model(mode)
    rng = np.random.default_rng(seed)
    steps = len(data.train_x) // batch_size
    print(f"demo, mode {mode}, head {head}, batch {batch_size}, {steps} steps/epoch")
    print("| epoch | seconds | compiles | compile s |\n| ---: | ---: | ---: | ---: |")
    for epoch in range(1, epochs + 1):
        with count_compiles() as seen:
            start = time.perf_counter()
            for x, y in demo.batches(data, batch_size, rng):
                model.step(x, y).item()
            seconds = time.perf_counter() - start
        print(f"| {epoch} | {seconds:.2f} | {seen.count} | {seen.seconds:.2f} |")
        if top and seen.names:
            worst = sorted(seen.names.items(), key=lambda kv: -kv[1])[:top]
            print("    most compiled (count, backend s): " + ", ".join(
                f"{n} {c} {seen.backend[n]:.2f}" for n, c in worst))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["partial", "eager"], default="partial")
    parser.add_argument("--head", choices=sorted(HEADS), default="median",
                        help="hard examples: loss >= the batch median (the demo's) or mean")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=0, help="list the N most compiled functions")
    args = parser.parse_args(argv)
    run(args.mode, args.head, args.epochs, args.batch_size, args.seed, args.top)


if __name__ == "__main__":
    main()
