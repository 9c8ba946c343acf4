"""Smoke test of the dynamic-shapes benchmark: its data, its child protocol and its modes on a
tiny model for a few steps (in this process, so it stays fast)."""

import json

import numpy as np
import pytest

from benchmarks import dynamic_shapes as ds

STEPS = 3


def test_full_data_gives_a_new_positive_count_at_almost_every_step():
    counts = ds.positive_counts(ds.make_data(ds.Config(), 300))
    assert len(set(counts.tolist())) >= 250
    assert counts.min() >= 16 and counts.max() <= 8 * 512 // 2


def test_quick_data_are_deterministic():
    a, b = ds.make_data(ds.QUICK, 3), ds.make_data(ds.QUICK, 3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["x"].shape == (3, 2, 8, 8, 8) and a["tgt"].shape == (3, 2, 128, 4)


@pytest.mark.slow
def test_eager_partial_and_xla_run_report_and_agree():
    # one test, so that the modes run in one worker, one after the other
    results = {mode: ds.summarize(ds.run_mode(mode, ds.QUICK, STEPS), warmup=1)
               for mode in ("eager", "partial", "xla")}
    for mode in ("eager", "partial"):
        r = results[mode]
        assert r["status"] == "ok" and r["steps"] == STEPS
        assert len(r["times"]) == len(r["losses"]) == len(r["compiles"]) == STEPS
        assert r["total_s"] > 0 and r["median_ms"] > 0
        assert r["compiles_last_100"] == r["compiles"][-1]  # fewer than 100 steps: all of them
        assert all(np.isfinite(r["losses"]))
    np.testing.assert_allclose(results["partial"]["losses"], results["eager"]["losses"],
                               rtol=1e-5)
    r = results["xla"]
    if r["status"] == "ok":
        np.testing.assert_allclose(r["losses"], results["eager"]["losses"], rtol=1e-4)
    else:  # the whole step with `out[pos]` inside may not compile yet: it must say why
        assert r["status"].startswith("unsupported: ") and len(r["status"]) > 20


def test_children_run_without_a_persistent_cache(monkeypatch):
    monkeypatch.setenv("PARTIAL_CACHE_DIR", "/somewhere")
    env = ds.child_env(cache=False)
    assert env["PARTIAL_CACHE_DIR"] == "" and env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert ds.child_env(cache=True)["JAX_ENABLE_COMPILATION_CACHE"] == "true"


@pytest.mark.slow
def test_child_prints_one_json_result_line(capsys, monkeypatch):
    cache = []  # a child sets the process's cache up: not this test worker's
    monkeypatch.setattr(ds, "configure_cache", cache.append)
    ds.main(["--child", "eager", "--quick", "--steps", "2"])
    assert cache == [None]
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(ds.MARK)]
    assert len(lines) == 1
    r = json.loads(lines[0][len(ds.MARK):])
    assert r["mode"] == "eager" and r["status"] == "ok" and len(r["losses"]) == 2


def fake_result(mode, losses, step_s, compiles):
    steps = len(losses)
    return ds.summarize({"mode": mode, "status": "ok", "steps": steps, "total_s": step_s * steps,
                         "times": [step_s] * steps, "losses": losses,
                         "compiles": list(compiles), "cache_loads": [0] * steps}, warmup=1)


def test_table_goals_and_agreement(capsys):
    rows = [("eager", fake_result("eager", [2.0, 1.0, 0.5], 0.02, [5, 6, 6])),
            ("xla", {"mode": "xla", "status": "unsupported: ValueReadError: no"}),
            ("torch_eager", fake_result("torch_eager", [2.0, 1.0, 0.5], 0.01, [0, 0, 0]))]
    ds.print_table(rows)
    ds.print_goals(rows)
    ds.print_agreement(rows)
    out = capsys.readouterr().out
    assert "| eager | 0.06 | 20.00 | 200.0 | 6 | 0.50000 | 2.00 | 2.00 |" in out
    assert "| xla | unsupported (below) |" in out and "ValueReadError: no" in out
    assert "6 compiles in the last 100 steps (goal <= 0: MISSED)" in out
    assert "eager: max relative difference of the loss curve from torch_eager 0.00e+00" in out


def test_ratios_are_against_the_faster_of_the_two_torch_runs(capsys):
    rows = [("torch_eager (first)", fake_result("torch_eager", [2.0, 1.0, 0.5], 0.02, [0] * 3)),
            ("partial", fake_result("partial", [2.0, 1.0, 0.5], 0.02, [5, 6, 6])),
            ("torch_eager (last)", fake_result("torch_eager", [2.0, 1.0, 0.5], 0.01, [0] * 3))]
    assert ds.reference(rows)["median_ms"] == 10.0 and ds.reference(rows[:2])["median_ms"] == 20
    ds.print_table(rows)
    ds.print_goals(rows)
    out = capsys.readouterr().out
    assert "| partial | 0.06 | 20.00 | 200.0 | 6 | 0.50000 | 2.00 | 2.00 |" in out
    assert "median step 2.00x torch (goal <= 1.25: MISSED)" in out
    assert ds.reference([("partial", rows[1][1])]) is None
