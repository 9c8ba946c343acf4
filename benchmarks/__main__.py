"""`python -m benchmarks`: the benchmark suite (see `benchmarks.suite`)."""

from benchmarks.suite import main

main()
