"""First steps of the digits demo in a new process, with and without the persistent compilation
cache (`partial.set_cache_dir`, here through `PARTIAL_CACHE_DIR`).

Run `python -m benchmarks.first_step [--rounds N]`. For each mode of `examples/demo.py` (partial:
compiled backbone, eager head; eager; xla: the whole static step) a fresh process builds the
model and times its first two training steps, in three conditions: no cache (every process
compiles everything), and a cache that an earlier process filled, `warm` (what a second run of a
script sees). Each process also reports its import time and the cache hits and misses counted
through `jax.monitoring` (hits include the eager ops' executables that `eager` loads from its own
folder of the cache). Conditions alternate over rounds; the table gives medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import json, sys, time
start = time.perf_counter()
import jax.monitoring
counts = {}
def count(event, **_):
    counts[event] = counts.get(event, 0) + 1
jax.monitoring.register_event_listener(count)
from examples import demo
imported = time.perf_counter() - start
mode = sys.argv[1]
data = demo.load_data(0)
demo.eg.random.seed(0)
model = demo.Model(mode)
stream = iter(demo.loader(data, 64, 0, forever=True))
times = []
for _ in range(2):
    x, y = next(stream)
    t = time.perf_counter()
    model.step(x, y).item()
    times.append(time.perf_counter() - t)
print(json.dumps({"import": imported, "step1": times[0], "step2": times[1],
                  "hits": counts.get("/jax/compilation_cache/cache_hits", 0)
                  + counts.get("/eager/persistent_cache/hits", 0)
                  + counts.get("/partial/segment_cache/hits", 0),
                  "misses": counts.get("/jax/compilation_cache/cache_misses", 0)}))
"""


def child(mode: str, cache: str | None) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["PARTIAL_CACHE_DIR"] = "" if cache is None else cache  # (empty: off)
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per condition")
    parser.add_argument("--modes", nargs="+", default=["partial", "eager", "xla"])
    args = parser.parse_args(argv)
    print("| mode | cache | import s | step 1 s | step 2 s | cache hits | cache misses |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for mode in args.modes:
        with tempfile.TemporaryDirectory() as cache:
            child(mode, cache)  # the earlier process that fills the cache
            runs: dict[str, list[dict[str, float]]] = {"none": [], "warm": []}
            for _ in range(args.rounds):
                runs["none"].append(child(mode, None))
                runs["warm"].append(child(mode, cache))
        for condition, results in runs.items():
            median = {k: statistics.median(r[k] for r in results) for k in results[0]}
            print(f"| {mode} | {condition} | {median['import']:.2f} | {median['step1']:.2f} | "
                  f"{median['step2']:.2f} | {median['hits']:.0f} | {median['misses']:.0f} |")


if __name__ == "__main__":
    main()
