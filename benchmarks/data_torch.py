"""The PyTorch side of `benchmarks.data`: torchvision's ImageFolder pipeline, timed an epoch at a
time. It imports only torch, torchvision, numpy and PIL, so it runs in another interpreter too
(this project's main one may have no working torchvision).

`benchmarks.data` imports it when `import torchvision` works, else runs it as a server:

    $TORCHVISION_PYTHON benchmarks/data_torch.py ROOT [--batch-size 32]

which prints one JSON line describing itself (versions, threads), then answers each line it
reads: `epoch W` with `{"seconds": s, "images": n}` for one epoch at `num_workers=W` (the first
one at each W builds the loader), `stages N` with the median milliseconds per image of each step
of the per-image pipeline over N images (and the collation of a batch). An empty line or end of
input stops it. Settings are PyTorch's defaults: the loader's process keeps
`torch.get_num_threads()` threads, each worker 1 (PyTorch's DataLoader sets that in workers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader, default_collate
from torchvision import datasets, transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # ImageNet's, RGB in [0, 1]


def transform() -> transforms.Compose:
    return transforms.Compose([transforms.RandomResizedCrop(224),
                               transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                               transforms.Normalize(MEAN, STD)])


def make_loader(root: str, num_workers: int, batch_size: int = 32) -> DataLoader:
    dataset = datasets.ImageFolder(root, transform=transform())
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                      num_workers=num_workers)


def epoch(loader: DataLoader) -> dict[str, float]:
    """Seconds of one pass over `loader` (workers' start included) and the images it gave."""
    start = time.perf_counter()
    images = sum(int(x.shape[0]) for x, _ in loader)
    return {"seconds": time.perf_counter() - start, "images": images}


def stages(root: str, n: int, batch_size: int = 32) -> dict[str, float]:
    """Median ms per image of each step of the pipeline over the first `n` images (3 passes),
    and of collating `batch_size` of them (per image); one torch thread, as in a worker."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _stages(root, n, batch_size)
    finally:
        torch.set_num_threads(threads)


def _stages(root: str, n: int, batch_size: int) -> dict[str, float]:
    dataset = datasets.ImageFolder(root)
    paths = [path for path, _ in dataset.samples[:n]]
    steps: list[tuple[str, Any]] = [
        ("crop + resize", transforms.RandomResizedCrop(224)),
        ("flip", transforms.RandomHorizontalFlip()),
        ("to float, CHW", transforms.ToTensor()),
        ("normalize", transforms.Normalize(MEAN, STD)),
    ]
    times: dict[str, list[float]] = {"decode": [], **{name: [] for name, _ in steps},
                                     "collate": []}
    for _ in range(3):
        spent = dict.fromkeys(times, 0.0)
        outs = []
        for path in paths:
            start = time.perf_counter()
            x = dataset.loader(path)  # PIL open + convert("RGB"): decodes
            spent["decode"] += time.perf_counter() - start
            for name, step in steps:
                start = time.perf_counter()
                x = step(x)
                spent[name] += time.perf_counter() - start
            outs.append((x, 0))
        start = time.perf_counter()
        for i in range(0, len(outs) - batch_size + 1, batch_size):
            default_collate(outs[i:i + batch_size])
        spent["collate"] = (time.perf_counter() - start) * len(outs) / (
            len(outs) // batch_size * batch_size or 1)
        for name in times:
            times[name].append(spent[name] / len(paths) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def describe() -> dict[str, Any]:
    return {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "pil": Image.__version__, "threads": torch.get_num_threads(),
            "image_backend": torchvision.get_image_backend()}


def serve(root: str, batch_size: int) -> None:
    torch.manual_seed(0)
    loaders: dict[int, DataLoader] = {}
    print(json.dumps(describe()), flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command:
            return
        if command[0] == "epoch":
            w = int(command[1])
            if w not in loaders:
                loaders[w] = make_loader(root, w, batch_size)
            answer = epoch(loaders[w])
        elif command[0] == "stages":
            answer = stages(root, int(command[1]), batch_size)
        else:
            raise SystemExit(f"data_torch: unknown command {line!r}")
        print(json.dumps(answer), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="an ImageFolder root: root/<class>/<image>")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    serve(args.root, args.batch_size)


if __name__ == "__main__":
    main()
