"""The sharded-training benchmark's machinery, on a tiny GPT over 2 virtual devices: a table row
per layout, less memory per device when sharded, and a width search that finds the crossing."""

import pytest

from benchmarks.sharded import HEADS, find, run_worker, table, total, verdicts
from benchmarks.sharded_worker import largest_width

TINY = ["--sizes", "d=32,hidden=128,blocks=1", "--steps", "1"]


@pytest.mark.slow  # a fresh process of 2 virtual devices compiling 4 steps: ~25 s of CPU
def test_sharding_a_tiny_gpt_over_two_devices_leaves_each_with_less():
    records = run_worker(["2", "--modes", "xla", "--layouts", "replicated,stage3", *TINY],
                         timeout=600)
    assert [r["kind"] for r in records] == ["machine", "row", "row"], records
    rep = find(records, "row", layout="replicated")
    split = find(records, "row", layout="stage3")
    assert total(split) < total(rep) and split["param_bytes"] < rep["param_bytes"]
    assert split["xla"]["argument"] < rep["xla"]["argument"]
    assert rep["layout_kept"] and split["layout_kept"]
    assert abs(split["first_loss"] - rep["first_loss"]) <= 1e-5 * rep["first_loss"]

    lines = table(records)
    assert len(lines) == 2 + 2
    assert all(line.count("|") == len(HEADS) + 1 for line in lines)
    assert "stage3 vs replicated" in verdicts(records, n=2)[0]


def test_the_width_search_returns_the_last_width_under_the_budget():
    def probe(d: int) -> tuple[int, int]:  # a peak quadratic in the width, as XLA's is
        return 3 * d * d + 1000 * d + 5000, 12 * d * d

    found = largest_width(10**6, probe, [64, 128, 256])
    assert found["width"] % 16 == 0
    assert found["peak_bytes"] <= 10**6 < found["next_peak_bytes"]
    assert found["params"] == 12 * found["width"] ** 2
    assert set(found["probes"]) >= {"64", "128", "256", str(found["width"])}
