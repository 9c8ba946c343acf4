"""`eager.data` against PyTorch's loader, and what `DataLoader(preload=True)` saves the digits demo.

Run `python -m benchmarks.data [--images 512] [--rounds 5] [--quick] [--dir DIR]`, with
`TORCHVISION_PYTHON=/path/to/python` when torchvision does not import here (that interpreter
needs torch, torchvision and Pillow; it runs `benchmarks/data_torch.py`). It prints, as markdown:

1. The machine (platform, CPUs, Python, jax, the load average at the start) and the threads
   each side uses.
2. Loader throughput: images per second of one epoch over an ImageFolder of synthetic JPEGs
   (made once, ~400x300 with smooth gradients, shapes and mild noise, `cv2.imwrite`'s default
   quality, cached in the temporary directory or in `--dir`), batch 32, drop_last, shuffled,
   RandomResizedCrop(224) + RandomHorizontalFlip + Normalize to a float32 CHW batch, at
   num_workers 0, 1 and 2: `eager.data` (OpenCV decode, BGR) against torchvision's ImageFolder
   pipeline (PIL decode, RGB). An epoch's time includes starting its workers (neither side
   keeps them between epochs by default). After a warm-up epoch of each, each round times one
   epoch of every configuration (the two sides alternate going first); the table gives the
   median images/s over rounds and the median over rounds of the per-round ratio eager.data /
   PyTorch at the same num_workers (the goal: >= 1). Both sides run with their defaults:
   OpenCV's and torch's thread pools in the loader's process, one thread per worker.
3. Where a sample's time goes: median ms per image of each step (decode, crop + resize, flip,
   to float + normalize + CHW, collation) over the first 64 images, one thread on each side (as
   in a worker), and for eager.data the trip of a batch from a worker to the loader through
   shared memory.
4. Device prefetch on the digits demo (`examples/demo.py`, batch 64): median seconds of a
   training step (taking the next batch, the step, reading the loss with `.item()`) fed by
   `DataLoader(ArrayDataset(train_x, train_y), RandomSampler(..., 64, drop_last=True))` with
   `preload=False` (numpy batches, converted by `eg.tensor` in the step) and `preload=True`
   (batches arrive as Tensors on the device), for the demo's `partial` and `xla` modes; rounds
   interleave the four and the ratio is the median per-round ratio.

`--quick` (tiny sizes, under a minute) is a smoke test, not for quoting.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np

import eager as eg
import eager.data.transform as T
from eager.data import ArrayDataset, Collator, DataLoader, ImageFolder, RandomSampler, shared_arrays
from eager.data.dataset.vision.folder import imread

BATCH = 32
WORKERS = (0, 1, 2)
CLASSES = 4
STAGE_IMAGES = 64
# ImageNet's mean and std in OpenCV's BGR order, on 0-255 (torchvision's, x 255, reversed)
MEAN_BGR = [103.53, 116.28, 123.675]
STD_BGR = [57.375, 57.12, 58.395]
ORDER = ("image", "image_category")  # ImageFolder's items: the label passes through
TORCH_SCRIPT = Path(__file__).with_name("data_torch.py")


# ----- the images ---------------------------------------------------------------------------
def _synthetic_photo(rng: np.random.Generator) -> np.ndarray:
    """A natural-ish BGR image about 400x300: a smooth two-colour gradient with a few soft
    shapes and mild noise, so that it compresses like a photo more than like a drawing."""
    h, w = int(rng.integers(270, 331)), int(rng.integers(360, 441))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    angle = rng.uniform(0, 2 * np.pi)
    t = ((xx * np.cos(angle) + yy * np.sin(angle)) / np.hypot(h, w) + 1) / 2
    a, b = rng.uniform(20, 235, 3), rng.uniform(20, 235, 3)
    image = a * (1 - t[..., None]) + b * t[..., None]
    image += 12 * np.sin(xx[..., None] / rng.uniform(15, 60) + rng.uniform(0, 6, 3))
    for _ in range(int(rng.integers(4, 10))):
        color = tuple(float(c) for c in rng.uniform(0, 255, 3))
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            axes = (int(rng.integers(10, w // 3)), int(rng.integers(10, h // 3)))
            cv2.ellipse(image, (cx, cy), axes, float(rng.uniform(0, 180)), 0, 360, color, -1)
        else:
            points = rng.integers(-60, 60, (int(rng.integers(3, 7)), 2)) + (cx, cy)
            cv2.fillPoly(image, [points.astype(np.int32)], color)
    image = cv2.GaussianBlur(image, (0, 0), rng.uniform(1.0, 3.0))
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def image_folder(images: int, directory: str | None) -> str:
    """The root of an ImageFolder of `images` synthetic JPEGs in `CLASSES` folders, made once
    (a `.complete` file marks a finished one; an unfinished one is made again)."""
    root = Path(directory) if directory else (
        Path(tempfile.gettempdir()) / f"eager-bench-data-{images}x{CLASSES}-v1")
    if (root / ".complete").exists():
        return str(root)
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / f"class{i % CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / f"{i:06d}.jpg"), _synthetic_photo(rng))
    (root / ".complete").touch()
    return str(root)


# ----- the loaders --------------------------------------------------------------------------
def transform() -> T.Compose:
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                      T.Normalize(mean=MEAN_BGR, std=STD_BGR), T.ToMode("CHW")], order=ORDER)


def our_loader(root: str, num_workers: int) -> DataLoader:
    dataset = ImageFolder(root)
    return DataLoader(dataset, RandomSampler(dataset, batch_size=BATCH, drop_last=True, seed=0),
                      transform=transform(), num_workers=num_workers)


def our_epoch(loader: DataLoader) -> dict[str, float]:
    start = time.perf_counter()
    images = sum(len(x) for x, _ in loader)
    return {"seconds": time.perf_counter() - start, "images": images}


class TorchInProcess:
    """The PyTorch side in this process (torchvision imports here)."""

    how = "in this process"

    def __init__(self, root: str) -> None:
        from benchmarks import data_torch

        self._module, self._root = data_torch, root
        self._loaders: dict[int, Any] = {}
        data_torch.torch.manual_seed(0)

    def describe(self) -> dict[str, Any]:
        return self._module.describe()

    def epoch(self, num_workers: int) -> dict[str, float]:
        if num_workers not in self._loaders:
            self._loaders[num_workers] = self._module.make_loader(self._root, num_workers, BATCH)
        return self._module.epoch(self._loaders[num_workers])

    def stages(self, n: int) -> dict[str, float]:
        return self._module.stages(self._root, n, BATCH)

    def close(self) -> None:
        pass


class TorchServer:
    """The PyTorch side in another interpreter: `benchmarks/data_torch.py` as a server that
    times one epoch per request, so rounds interleave as they do in one process."""

    def __init__(self, python: str, root: str) -> None:
        self.how = f"in a subprocess of {python}"
        self._process = subprocess.Popen(
            [python, str(TORCH_SCRIPT), root, "--batch-size", str(BATCH)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._description = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"{TORCH_SCRIPT.name} exited (code {self._process.wait()}); "
                               "its error is above")
        return json.loads(line)

    def _ask(self, command: str) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self._answer()

    def describe(self) -> dict[str, Any]:
        return self._description

    def epoch(self, num_workers: int) -> dict[str, float]:
        return self._ask(f"epoch {num_workers}")

    def stages(self, n: int) -> dict[str, float]:
        return self._ask(f"stages {n}")

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=30)


def torch_side(root: str) -> tuple[TorchInProcess | TorchServer | None, str]:
    """The PyTorch side and how it runs, or None and why it is skipped."""
    if importlib.util.find_spec("torchvision") is not None:
        try:
            import torchvision  # noqa: F401 - the check is that it imports
        except Exception as e:  # noqa: BLE001 - a broken install raises anything
            reason = f"torchvision does not import here ({type(e).__name__}: {e})"
        else:
            return TorchInProcess(root), ""
    else:
        reason = "torchvision is not installed here"
    python = os.environ.get("TORCHVISION_PYTHON")
    if python:
        return TorchServer(python, root), f"{reason}: PyTorch runs in TORCHVISION_PYTHON"
    return None, (f"PyTorch comparison skipped: {reason}, and TORCHVISION_PYTHON is unset; set "
                  "it to a Python with torch and torchvision, e.g. "
                  "TORCHVISION_PYTHON=.venv-torchvision/bin/python python -m benchmarks.data")


# ----- 2. throughput ------------------------------------------------------------------------
def throughput(root: str, rounds: int, torch: Any) -> dict[tuple[str, int], list[float]]:
    """Per (side, num_workers), images/s of each round (after a warm-up epoch of each)."""
    ours = {w: our_loader(root, w) for w in WORKERS}
    runs: dict[str, Callable[[int], dict[str, float]]] = {
        "eager.data": lambda w: our_epoch(ours[w])}
    if torch is not None:
        runs["PyTorch"] = torch.epoch
    for w in WORKERS:
        for run in runs.values():
            run(w)
    rates: dict[tuple[str, int], list[float]] = {(s, w): [] for s in runs for w in WORKERS}
    for r in range(rounds):
        for w in WORKERS:
            sides = list(runs) if r % 2 == 0 else list(reversed(runs))
            for side in sides:
                done = runs[side](w)
                rates[side, w].append(done["images"] / done["seconds"])
    return rates


def throughput_table(rates: dict[tuple[str, int], list[float]]) -> str:
    lines = ["| configuration | images/s (median) | eager.data / PyTorch, same num_workers "
             "(goal >= 1) |", "| --- | ---: | ---: |"]
    for w in WORKERS:
        ours, theirs = rates["eager.data", w], rates.get(("PyTorch", w))
        ratio = (f"{statistics.median(a / b for a, b in zip(ours, theirs)):.2f}x"
                 if theirs else "n/a")
        lines.append(f"| eager.data, num_workers={w} | {statistics.median(ours):.0f} | {ratio} |")
        if theirs:
            lines.append(f"| PyTorch, num_workers={w} | {statistics.median(theirs):.0f} | |")
    return "\n".join(lines)


# ----- 3. stages ----------------------------------------------------------------------------
def our_stages(root: str, n: int) -> dict[str, float]:
    """Median ms per image of each step over the first `n` images (3 passes), one OpenCV
    thread as in a worker; and per image, the collation and the shared-memory trip of a
    collated batch of `BATCH`."""
    dataset = ImageFolder(root)
    paths = [path for path, _ in dataset.samples[:n]]
    t = transform()
    steps = [("crop + resize", t.transforms[0]), ("flip", t.transforms[1]),
             ("normalize", t.transforms[2]), ("to CHW", t.transforms[3])]
    names = ["decode", *(name for name, _ in steps), "collate", "to the loader"]
    times: dict[str, list[float]] = {name: [] for name in names}
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    directory = shared_arrays.new_directory()
    try:
        for _ in range(3):
            spent = dict.fromkeys(names, 0.0)
            outs = []
            for i, path in enumerate(paths):
                start = time.perf_counter()
                sample: Any = (imread(path), np.int32(i % CLASSES))
                spent["decode"] += time.perf_counter() - start
                for name, step in steps:
                    start = time.perf_counter()
                    sample = step.apply(sample)
                    spent[name] += time.perf_counter() - start
                outs.append(sample)
            batches = len(outs) // BATCH
            for i in range(batches):
                start = time.perf_counter()
                batch = Collator().apply(outs[i * BATCH:(i + 1) * BATCH])
                spent["collate"] += time.perf_counter() - start
                start = time.perf_counter()
                shared_arrays.receive(shared_arrays.share(batch, directory))
                spent["to the loader"] += time.perf_counter() - start
            for name in names:
                per = len(paths) if name not in ("collate", "to the loader") else batches * BATCH
                times[name].append(spent[name] / max(per, 1) * 1e3)
    finally:
        cv2.setNumThreads(threads)
        shared_arrays.remove_directory(directory)
    return {name: statistics.median(t) for name, t in times.items()}


def stages_table(ours: dict[str, float], theirs: dict[str, float] | None) -> str:
    def get(stages: dict[str, float] | None, *names: str) -> str:
        return "n/a" if stages is None else f"{sum(stages[n] for n in names):.2f}"

    rows = [("decode (cv2.imread / PIL open + RGB)", ("decode",), ("decode",)),
            ("random resized crop", ("crop + resize",), ("crop + resize",)),
            ("horizontal flip", ("flip",), ("flip",)),
            ("to float, normalize, CHW (Normalize + ToMode / ToTensor + Normalize)",
             ("normalize", "to CHW"), ("to float, CHW", "normalize")),
            ("collate (per image)", ("collate",), ("collate",))]
    lines = ["| step | eager.data ms/image | PyTorch ms/image |", "| --- | ---: | ---: |"]
    for label, mine, other in rows:
        lines.append(f"| {label} | {get(ours, *mine)} | {get(theirs, *other)} |")
    lines.append(f"| total | {sum(v for k, v in ours.items() if k != 'to the loader'):.2f} | "
                 f"{'n/a' if theirs is None else f'{sum(theirs.values()):.2f}'} |")
    lines.append(f"| batch from a worker to the loader (shared memory, per image) | "
                 f"{ours['to the loader']:.2f} | n/a |")
    return "\n".join(lines)


# ----- 4. device prefetch on the demo ---------------------------------------------------------
def _endless(loader: DataLoader) -> Iterator[Any]:
    while True:
        yield from loader


def prefetch(rounds: int, steps: int) -> dict[tuple[str, bool], list[float]]:
    """Per (mode, preload), the median seconds of a step in each round."""
    from examples import demo

    data = demo.load_data(seed=0)
    dataset = ArrayDataset(data.train_x, data.train_y)
    runs: dict[tuple[str, bool], Callable[[], None]] = {}
    for mode in ("partial", "xla"):
        eg.random.seed(0)
        model = demo.Model(mode)
        for preload in (False, True):
            sampler = RandomSampler(dataset, 64, drop_last=True, seed=0)
            stream = _endless(DataLoader(dataset, sampler, preload=preload))

            def step(model: Any = model, stream: Iterator[Any] = stream,
                     preload: bool = preload) -> None:
                x, y = next(stream)
                if not preload:
                    x, y = eg.tensor(x), eg.tensor(y)
                model.step(x, y).item()

            runs[mode, preload] = step
    for run in runs.values():
        for _ in range(5):  # compile, warm up
            run()
    times: dict[tuple[str, bool], list[float]] = {key: [] for key in runs}
    for r in range(rounds):
        for key in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            per_step = []
            for _ in range(steps):
                start = time.perf_counter()
                runs[key]()
                per_step.append(time.perf_counter() - start)
            times[key].append(statistics.median(per_step))
    return times


def prefetch_table(times: dict[tuple[str, bool], list[float]]) -> str:
    lines = ["| demo mode | preload=False ms/step | preload=True ms/step | "
             "preload True / False (< 1: prefetch helps) |",
             "| --- | ---: | ---: | ---: |"]
    for mode in ("partial", "xla"):
        off, on = times[mode, False], times[mode, True]
        ratio = statistics.median(a / b for a, b in zip(on, off))
        lines.append(f"| {mode} | {statistics.median(off) * 1e3:.2f} | "
                     f"{statistics.median(on) * 1e3:.2f} | {ratio:.2f} |")
    return "\n".join(lines)


# ----- the report ----------------------------------------------------------------------------
def machine() -> str:
    import jax

    device = jax.devices()[0]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, jax {jax.__version__} on {device.platform} "
            f"({device.device_kind}), OpenCV {cv2.__version__}; load average at the start "
            f"{load}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512, help="images in the ImageFolder")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds of each part")
    parser.add_argument("--steps", type=int, default=60, help="demo steps per round")
    parser.add_argument("--dir", help="where to make (or find) the ImageFolder")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.rounds, args.steps = 2 * BATCH, 2, 10
    print(machine())
    root = image_folder(args.images, args.dir)
    sizes = [p.stat().st_size for p in Path(root).rglob("*.jpg")]
    print(f"images: {len(sizes)} JPEGs in {CLASSES} classes under {root}, mean "
          f"{statistics.mean(sizes) / 1024:.0f} KiB")
    torch, note = torch_side(root)
    if note:
        print(note)
    threads = f"eager.data: OpenCV {cv2.getNumThreads()} threads in the loader's process, 1 " \
              "per worker"
    if torch is not None:
        d = torch.describe()
        threads += (f"; PyTorch {d['torch']} (torchvision {d['torchvision']}, PIL {d['pil']}, "
                    f"{torch.how}): {d['threads']} threads in the loader's process, 1 per "
                    "worker (defaults)")
    print(threads, flush=True)
    try:
        rates = throughput(root, args.rounds, torch)
        print(f"\n## Loader throughput: batch {BATCH}, RandomResizedCrop(224) + flip + "
              f"normalize, one epoch of {args.images // BATCH * BATCH} images (median of "
              f"{args.rounds} rounds)\n")
        print(throughput_table(rates), flush=True)
        n = min(STAGE_IMAGES, args.images)
        print(f"\n## Where a sample's time goes (median ms per image over {n} images, one "
              "thread)\n")
        print(stages_table(our_stages(root, n), torch.stages(n) if torch else None), flush=True)
    finally:
        if torch is not None:
            torch.close()
    times = prefetch(args.rounds, args.steps)
    print(f"\n## Device prefetch on the digits demo: batch 64, median step time over "
          f"{args.steps} steps, median of {args.rounds} rounds\n")
    print(prefetch_table(times))


if __name__ == "__main__":
    main()
