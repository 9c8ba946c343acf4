"""Repeat a test that used to fail at random, many times in one process, and count failures.

Run `python -m benchmarks.repeat_flaky [--runs 500]` from the repository root. It calls
`test_tensors_stored_on_modules_and_in_containers_escape_and_are_written_back` (in
`tests/partial/test_state.py`) `--runs` times in this process, each run seeded as the test
suite's autouse fixture seeds it (`tests/conftest.py`: the framework generator from the CRC-32
of the test's node id). That test failed about 1 run in 25 when guards keyed objects by `id()`:
a new argument tensor took a dead state tensor's id, was taken for state, and the region was
captured again, running its Python side effects twice. Repeating it in one process, where freed
ids are reused as in a long test run, checks that the guards no longer depend on ids: 500 runs
in a row without a failure, where about 20 would have failed then.

Prints how many runs failed and the traceback of the first failure; the exit status is 1 if
any run failed. Not part of the test suite: 500 runs take a few minutes.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
import zlib

import eager as eg
from tests.partial.test_state import (
    test_tensors_stored_on_modules_and_in_containers_escape_and_are_written_back as flaky_test,
)

NODE_ID = ("tests/partial/test_state.py::"
           "test_tensors_stored_on_modules_and_in_containers_escape_and_are_written_back")


def run_once() -> None:
    """One run, as pytest runs it: seeded by `tests/conftest.py`'s autouse fixture (the test
    takes no other fixture)."""
    eg.random.seed(zlib.crc32(NODE_ID.encode()))
    flaky_test()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500, help="how many runs (default 500)")
    parser.add_argument("--stop-at-first", action="store_true",
                        help="stop at the first failing run")
    parser.add_argument("--verbose", action="store_true",
                        help="keep the recompile warnings of the `partial` logger")
    args = parser.parse_args(argv)
    if not args.verbose:
        # Each run wraps the same region code over new objects, and wrappers of the same code
        # share one cache, so from the ninth run on every run's (expected) capture warns.
        logging.getLogger("partial").setLevel(logging.ERROR)
    failed: list[int] = []
    first = ""
    runs = 0
    start = time.perf_counter()
    for i in range(args.runs):
        runs += 1
        try:
            run_once()
        except Exception:  # noqa: BLE001  (an assertion or any error: a failed run)
            failed.append(i)
            if not first:
                first = traceback.format_exc()
            if args.stop_at_first:
                break
        if (i + 1) % 50 == 0:
            print(f"  {i + 1} runs, {len(failed)} failed ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    print(f"{NODE_ID}\n{len(failed)} of {runs} runs failed "
          f"({time.perf_counter() - start:.1f} s)")
    if failed:
        shown = ", ".join(map(str, failed[:20])) + (" ..." if len(failed) > 20 else "")
        print(f"failing runs (0-based): {shown}\n\nfirst failure (run {failed[0]}):\n{first}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
