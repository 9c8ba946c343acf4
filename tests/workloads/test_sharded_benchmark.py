"""The sharded-training benchmark's machinery, on a tiny GPT over 2 virtual devices: a table row
per layout, less memory per device when sharded, and a width search that finds the crossing."""

import pytest

from benchmarks.sharded import HEADS, find, run_worker, table, total, verdicts, wider
from benchmarks.sharded_worker import cross_probe, largest_width

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


def test_every_searched_layout_is_measured_at_the_widths_the_others_reach():
    found = {"stage3": {"width": 784, "probes": {"512": 67, "784": 125}},
             "replicated": {"width": 512, "probes": {"512": 126, "528": 134}}}
    asked = []

    def probe(d: int, layout: str) -> int:
        asked.append((d, layout))
        return 290

    cross_probe(found, probe)
    assert asked == [(784, "replicated")]
    assert list(found["replicated"]["probes"]) == ["512", "528", "784"]
    assert found["stage3"]["probes"] == {"512": 67, "784": 125}
    ratios = wider([{"kind": "search", "devices": 4, "layout": k, "params": 15_225_536, **v}
                    for k, v in found.items()], 4)
    assert "d 784: 0.43x" in ratios[0] and "(goal <= 0.5x): MET" in ratios[1]
