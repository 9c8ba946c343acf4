"""The table of `benchmarks.zoo`: one markdown row per way to run a model, made from the raw
results of its processes (`benchmarks.zoo` describes the columns), and the raw results as JSON.

A result is a worker's report (`first`, `median`, `losses`, `build`, `peak_mb` in s, MB) or
`{"error": why}` when its process failed, or `{"skipped": why}` when it was not run.
"""

from __future__ import annotations

import json
from typing import Any

Result = dict[str, Any]


def header(cores: int, steps: int) -> list[str]:
    """The table's header: `cores` is how many the unpinned runs had, `steps` the timed steps."""
    names = ["model", "run", f"1st step s: cold ({cores} cores)", "cold, 1 core (/ cold)",
             "warm", "1st step / PyTorch's: cold / warm", "median step s: cold / warm",
             "median / PyTorch's: cold / warm", "build s: cold / warm", "peak MB: cold / warm",
             f"max loss diff from eager ({steps + 1} steps)",
             "losses, cache off + serial compiles"]
    return ["| " + " | ".join(names) + " |",
            "| --- | --- |" + " ---: |" * (len(names) - 2)]


def ok(r: Result | None) -> bool:
    """Whether `r` is a finished run's report."""
    return bool(r) and "error" not in r and "skipped" not in r


def _num(r: Result | None, key: str, fmt: str) -> str:
    """`r[key]` formatted, "failed" or "-" where `r` has no value."""
    if r is not None and ok(r):
        return format(r[key], fmt)
    return "failed" if r and "error" in r else "-"


def _ratio(r: Result | None, ref: Result | None, key: str) -> str:
    """`r[key] / ref[key]` as "1.23x", "-" where either is missing."""
    return f"{r[key] / ref[key]:.2f}x" if ok(r) and ok(ref) and ref[key] else "-"


def _one_core(one: Result | None, cold: Result | None) -> str:
    """The cold first step on one core and its ratio to the cold one on every core."""
    if one and "skipped" in one:
        return _short(one, 60)
    ratio = _ratio(one, cold, "first")
    return _num(one, "first", ".1f") + ("" if ratio == "-" else f" ({ratio})")


def _both(cold: Result | None, warm: Result | None, cell: Any) -> str:
    """"cold / warm" of one cell function, or the cold run's alone where warm was not run."""
    return cell(cold) if warm is None else f"{cell(cold)} / {cell(warm)}"


def _diff(runs: list[Result | None], eager: Result | None) -> str:
    """The largest loss difference of `runs` from this project's eager cold run."""
    if not ok(eager):
        return "-"
    diffs = [abs(a - b) for r in runs if ok(r) for a, b in zip(r["losses"], eager["losses"])]
    return f"{max(diffs):.1e}" if diffs else "-"


def exactness(exact: Result | None, cold: Result | None, warm: Result | None) -> str:
    """Whether the losses of `exact` (cache off, serial compiles) equal the cold and warm runs'
    bit for bit (float ==), or the largest difference: the cache and parallel compiles must
    not change what is computed."""
    if exact is None:
        return "-"
    if not ok(exact):
        return f"failed: {_short(exact)}"
    cells = []
    for which, r in (("cold", cold), ("warm", warm)):
        if not ok(r):
            cells.append(f"{which} failed")
        elif len(r["losses"]) == len(exact["losses"]) and all(
                a == b for a, b in zip(r["losses"], exact["losses"])):
            cells.append(f"== {which}")
        else:
            most = max(abs(a - b) for a, b in zip(r["losses"], exact["losses"]))
            cells.append(f"!= {which} (max diff {most:.1e})")
    return ", ".join(cells)


def _short(r: Result, width: int = 100) -> str:
    """Why `r` failed or was skipped, cut to `width` characters, without table separators."""
    why = str(r.get("error", r.get("skipped", ""))).replace("|", "/").replace("\n", " ")
    return why if len(why) <= width else why[:width - 3] + "..."


def mode_row(name: str, label: str, runs: dict[str, Result | None], torch: Result | None,
             eager: Result | None) -> str:
    """One project mode's row; `runs` has "cold", "warm" and, for the best mode, "one_core" and
    "exact"; `torch` is PyTorch eager's result, `eager` this project's eager cold run."""
    cold, warm = runs.get("cold"), runs.get("warm")
    one = runs.get("one_core")
    failed = [f"{k} failed: {_short(r)}" for k, r in runs.items()
              if r and "error" in r and k != "exact"]
    cells = [name, label + "".join(f" ({f})" for f in failed),
             _num(cold, "first", ".1f"),
             _one_core(one, cold),
             _num(warm, "first", ".1f"),
             _both(cold, warm, lambda r: _ratio(r, torch, "first")),
             _both(cold, warm, lambda r: _num(r, "median", ".2f")),
             _both(cold, warm, lambda r: _ratio(r, torch, "median")),
             _both(cold, warm, lambda r: _num(r, "build", ".1f")),
             _both(cold, warm, lambda r: _num(r, "peak_mb", ".0f")),
             _diff([cold, warm, one], eager),
             exactness(runs.get("exact"), cold, warm)]
    return "| " + " | ".join(cells) + " |"


def torch_row(name: str, label: str, r: Result | None, ref: Result | None) -> str:
    """A PyTorch run's row (it has no persistent cache: one first step), ratios to `ref`."""
    if not r:
        return f"| {name} | {label} | not run |" + " |" * 9
    if not ok(r):
        return f"| {name} | {label} | failed: {_short(r)} |" + " |" * 9
    cells = [name, label, f"{r['first']:.1f}", "-", "-", _ratio(r, ref, "first"),
             f"{r['median']:.2f}", _ratio(r, ref, "median"), f"{r['build']:.1f}",
             f"{r['peak_mb']:.0f}", "-", "-"]
    return "| " + " | ".join(cells) + " |"


def rows(name: str, model: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Every row of one model's results (`benchmarks.zoo.measure`); `labels` names its modes."""
    torch = model["torch"].get("eager")
    eager = model["modes"].get("eager", {}).get("cold")
    lines = []
    for mode, runs in model["modes"].items():
        if mode == model["best"]:
            runs = {**runs, "one_core": model.get("one_core"), "exact": model.get("exact")}
        lines.append(mode_row(name, labels[mode], runs, torch, eager))
    lines.append(torch_row(name, "PyTorch eager", torch, torch))
    if "compile" in model["torch"]:
        what = "model" if name == "resnet18" else "backbone"
        lines.append(torch_row(name, f"PyTorch, torch.compile of the {what}",
                               model["torch"]["compile"], torch))
    return lines


def write_json(path: str, meta: dict[str, Any], models: dict[str, Any]) -> None:
    """All raw results (every process's timings, losses, memory, errors) to `path`."""
    with open(path, "w") as f:
        json.dump({"meta": meta, "models": models}, f, indent=1)
        f.write("\n")
