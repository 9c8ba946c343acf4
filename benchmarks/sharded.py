"""Sharded training (ZeRO / FSDP) of the GPT workload: per-device memory and step time,
replicated vs sharded, on 1, 2 and 4 devices, in eager, partial and xla modes.

Run `python -m benchmarks.sharded [--devices 1,2,4] [--modes eager,partial,xla] [--steps 5]
[--budget-mib 128] [--quick] [--json PATH]`.

Each device count runs in a fresh process (`benchmarks.sharded_worker`: jax fixes its devices when
its backend starts), on that many virtual CPU devices (or the first real accelerators where jax
has them). There the GPT workload of `benchmarks.workloads` (Adam, batch 16 x 64 tokens) is
split over a 1-D mesh with `dist.shard_batch` and its model and optimizer are laid out three ways:

- *replicated*: `dist.replicate(net)`, `dist.replicate(opt)` (data parallelism);
- *stage1*: `dist.shard_params([net, opt], mesh, stage=1)`, the Adam state split (ZeRO-1);
- *stage3*: `dist.shard_params([net, opt], mesh)`, parameters and Adam state split (FSDP).

On one device the three are the same placement, so only *replicated* runs there. Per row:

- params KiB, Adam KiB: what one device holds (the bytes of its `addressable_shards`) after the
  steps; *vs repl.*: params + Adam over the replicated row of the same device count (and mode,
  where there is one: the placement is the same in every mode);
- XLA peak MiB: per device, argument + output + temp - alias from XLA's memory analysis (exact on
  virtual devices: each compiles the partitioned program): of the whole `xla_trace` step, or
  of the larger of the `partial_trace` backbone's forward and backward executables (the eager
  head, loss and Adam update are outside it). Eager runs op by op, one small program per op, so
  it has no step peak. *temp MiB* is the peak's temporaries (activations, gradients, gathered
  weights); the rest is arguments and outputs (weights, Adam state, batch, residuals). jax's
  `peak_memory_in_bytes` is not used: on the CPU backend it reports about the arguments' size
  (5.7 MB for the one-device step whose temporaries alone are 40 MiB);
- step ms: median of `--steps` timed steps after 2 warmup steps, each synced on its loss and the
  whole state. Virtual devices share this machine's cores (all 4 "devices" on 2 cores here), so
  step times compare layouts, not device counts, and are indicative only;
- layout kept: every parameter and state tensor still has the layout it was placed in.

Eager on several virtual devices waits for each op's result that lies on several devices
(Note [CPU collectives in flight] in `eager/device.py`: XLA:CPU's in-process collectives
deadlock with many such programs in flight), so its step time there includes that wait.

The width search: for a per-device budget (`--budget-mib`, 128 MiB), the widest GPT of the
workload's shape (d a multiple of 16, hidden 4 d, 4 heads, 2 blocks, same batch) whose whole
xla_trace step (peak by XLA's analysis, which includes the weights and Adam state as arguments)
fits, found from compiled steps (see `sharded_worker.largest_width`). Why 128 MiB: the workload's
own step (d = 128) already peaks at 35 MiB on one device, mostly activations (16 x 64 tokens),
so a budget of a few MB fits no GPT with this batch at all; at 128 MiB the weights, gradients and
Adam state (16 bytes a parameter) are over a third of the one-device peak, and the 4-device
search stays near d = 850, where a probe compiles and runs in about 20 s on 2 cores. The
parameter count grows as d^2 and the activations (the batch is split too) as d, so 4x the memory
buys about 2x the width and 4x or more the parameters: both ratios are reported, as measured.
Each searched layout is also measured at the width the others reach, so the peaks compare at the
same model: above all at the widest stage3 fits, the model sharding exists for, where the
parameters, gradients and Adam state rather than the activations fill the step.

`--quick` (a smoke run, not for quoting): devices 1 and 4, 2 timed steps, no stage1, the
search at 64 MiB and for stage3 only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MiB, KiB = 2**20, 2**10
GOAL_BYTES, GOAL_PEAK, GOAL_GROWTH = 0.3, 0.5, 4.0
HEADS = ["devices", "mode", "layout", "params KiB", "Adam KiB", "vs repl.", "XLA peak MiB",
         "temp MiB", "vs repl.", "step ms", "layout kept"]


# ----- running the device counts ----------------------------------------------------------------
def run_worker(args: list[str], timeout: float) -> list[dict]:
    """`python -m benchmarks.sharded_worker ARGS` in a fresh process: its JSON lines, or one
    `failed` record with the last line of its error output (a crash, a deadlock's abort, a
    timeout)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "benchmarks.sharded_worker", *args]
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
        out, err, failed = done.stdout, done.stderr, done.returncode != 0
    except subprocess.TimeoutExpired as e:
        out, err, failed = _text(e.stdout), f"timed out after {timeout:.0f} s", True
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if failed:
        lines = [ln for ln in err.strip().splitlines() if ln.strip() and "@" not in ln[:8]]
        records.append({"kind": "failed", "args": " ".join(args),
                        "why": (lines[-1] if lines else "no output")[:300]})
    return records


def _text(data: Any) -> str:
    return data.decode() if isinstance(data, bytes) else (data or "")


def measure_all(devices: list[int], modes: list[str], steps: int, budget_mib: float,
                search: list[int], widths: str, quick: bool = False) -> list[dict]:
    """Every device count's rows (and, for the counts in `search`, its width search: stage3 and,
    unless `quick`, replicated for comparison; on one device they are the same)."""
    records: list[dict] = []
    for n in devices:
        layouts = ("replicated" if n == 1 else "replicated,stage3" if quick
                   else "replicated,stage1,stage3")
        args = [str(n), "--modes", ",".join(modes), "--layouts", layouts,
                "--steps", str(steps)]
        if n in search:
            searched = "replicated" if n == 1 else "stage3" if quick else "stage3,replicated"
            args += ["--budget-mib", str(budget_mib), "--widths", widths,
                     "--search-layouts", searched]
        records += run_worker(args, timeout=1800)
    return records


# ----- the report -------------------------------------------------------------------------------
def rows_of(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "row"]


def find(records: list[dict], kind: str, **match: Any) -> dict | None:
    """The first record of `kind` whose fields equal `match`."""
    return next((r for r in records if r["kind"] == kind
                 and all(r.get(k) == v for k, v in match.items())), None)


def total(row: dict) -> int:
    return row["param_bytes"] + row["state_bytes"]


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def table(records: list[dict]) -> list[str]:
    """The markdown table: one row per device count, mode and layout."""
    order = {"eager": 0, "partial": 1, "xla": 2, "replicated": 0, "stage1": 1, "stage3": 2}
    lines = ["| " + " | ".join(HEADS) + " |", "| ---: | --- | --- |" + " ---: |" * 7 + " --- |"]
    rows = rows_of(records)
    for r in sorted(rows, key=lambda r: (r["devices"], order[r["mode"]], order[r["layout"]])):
        base = find(records, "row", devices=r["devices"], mode=r["mode"], layout="replicated")
        same = base or find(records, "row", devices=r["devices"], layout="replicated")
        xla, bx = r["xla"], base and base["xla"]
        step = "n/a (1st step only)" if r["step_ms"] is None else f"{r['step_ms']:.0f}"
        cells = [str(r["devices"]), r["mode"], r["layout"], f"{r['param_bytes'] / KiB:.0f}",
                 f"{r['state_bytes'] / KiB:.0f}", _ratio(total(r), same and total(same)),
                 "n/a (op by op)" if xla is None else f"{xla['peak'] / MiB:.1f}",
                 "n/a" if xla is None else f"{xla['temp'] / MiB:.1f}",
                 _ratio(xla and xla["peak"], bx and bx["peak"]), step,
                 "yes" if r["layout_kept"] else "NO"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def search_table(records: list[dict]) -> list[str]:
    """The width search: per device count and layout, the widest GPT under the budget."""
    found = [r for r in records if r["kind"] == "search"]
    if not found:
        return []
    lines = [f"Widest GPT whose xla_trace step fits {found[0]['budget'] / MiB:.0f} MiB per "
             "device (XLA peak; d a multiple of 16, hidden 4 d):", "",
             "| devices | layout | width d | parameters | peak MiB | at d + 16 MiB | probed d |",
             "| ---: | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in sorted(found, key=lambda r: (r["devices"], r["layout"])):
        lines.append(f"| {r['devices']} | {r['layout']} | {r['width']} | {r['params']:,} | "
                     f"{r['peak_bytes'] / MiB:.1f} | {r['next_peak_bytes'] / MiB:.1f} | "
                     f"{', '.join(r['probes'])} |")
    return lines


def verdicts(records: list[dict], n: int = 4) -> list[str]:
    """The goals of sharded training, each met or not, with its figures: per device, params and
    Adam state at most GOAL_BYTES of replicated, XLA peak at most GOAL_PEAK, and about
    GOAL_GROWTH times the widest model from one device to n."""
    out = []
    sharded = [r for r in rows_of(records) if r["devices"] == n and r["layout"] == "stage3"]
    pairs = [(r, find(records, "row", devices=n, mode=r["mode"], layout="replicated"))
             for r in sharded]
    pairs = [(r, b) for r, b in pairs if b is not None]
    if pairs:
        worst = max(total(r) / total(b) for r, b in pairs)
        r, b = pairs[0]
        out.append(f"- params + Adam state per device, {n} devices, stage3 vs replicated: "
                   f"{total(r) / KiB:.0f} vs {total(b) / KiB:.0f} KiB = {worst:.2f}x in every "
                   f"mode (goal <= {GOAL_BYTES}x): {_met(worst <= GOAL_BYTES)}")
    for r, b in pairs:
        if r["xla"] and b["xla"]:
            x = r["xla"]["peak"] / b["xla"]["peak"]
            out.append(f"- XLA peak per device, {n} devices, {r['mode']}, stage3 vs replicated: "
                       f"{r['xla']['peak'] / MiB:.1f} vs {b['xla']['peak'] / MiB:.1f} MiB = "
                       f"{x:.2f}x (goal <= {GOAL_PEAK}x): {_met(x <= GOAL_PEAK)}; temporaries "
                       f"{b['xla']['temp'] / MiB:.1f} -> {r['xla']['temp'] / MiB:.1f} MiB")
            if r["mode"] == "xla":  # what no params and state at all would leave
                floor = 1 - total(b) / b["xla"]["peak"]
                out.append(f"  (the replicated step's params + Adam state are "
                           f"{total(b) / MiB:.1f} of its {b['xla']['peak'] / MiB:.1f} MiB: "
                           f"removing them entirely would leave {floor:.2f}x)")
    out += wider(records, n)
    one = find(records, "search", devices=1)
    split = find(records, "search", devices=n, layout="stage3")
    for layout in ("stage3", "replicated"):
        many = find(records, "search", devices=n, layout=layout)
        if one and many:
            w, p = many["width"] / one["width"], many["params"] / one["params"]
            goal = (f" (goal about {GOAL_GROWTH:.0f}x: {_met(w >= 0.875 * GOAL_GROWTH)} by "
                    f"width, {_met(p >= 0.875 * GOAL_GROWTH)} by parameters)"
                    if layout == "stage3" else
                    " (data parallelism alone, for comparison" + (
                        f"; stage3 fits {split['params'] / many['params']:.2f}x its parameters)"
                        if split else ")"))
            out.append(f"- widest GPT under {one['budget'] / MiB:.0f} MiB, 1 -> {n} devices "
                       f"{layout}: d {one['width']} -> {many['width']} = {w:.2f}x, parameters "
                       f"{one['params'] / 1e6:.2f}M -> {many['params'] / 1e6:.2f}M = {p:.2f}x"
                       + goal)
    return out


def wider(records: list[dict], n: int) -> list[str]:
    """The xla step's peak, stage3 over replicated, at the widths both searches probed."""
    split = find(records, "search", devices=n, layout="stage3")
    rep = find(records, "search", devices=n, layout="replicated")
    if not split or not rep:
        return []
    both = sorted(set(split["probes"]) & set(rep["probes"]), key=int)
    ratios = [f"d {d}: {split['probes'][d] / rep['probes'][d]:.2f}x" for d in both]
    out = [f"  (the same ratio for wider GPTs, xla step, {n} devices: {', '.join(ratios)})"]
    d = str(split["width"])
    if d in rep["probes"]:  # the model sharding was for: the widest stage3 fits the budget
        x = split["probes"][d] / rep["probes"][d]
        out.append(f"- XLA peak per device, {n} devices, xla, stage3 vs replicated, at the width "
                   f"stage3 reaches (d {d}, {split['params'] / 1e6:.1f}M parameters): "
                   f"{split['probes'][d] / MiB:.1f} vs {rep['probes'][d] / MiB:.1f} MiB = "
                   f"{x:.2f}x (goal <= {GOAL_PEAK}x): {_met(x <= GOAL_PEAK)}")
    return out


def _met(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def notes(records: list[dict]) -> list[str]:
    """Failed workers, layouts that drifted, first losses that differ from one device's."""
    out = [f"- worker `{r['args']}` failed: {r['why']}" for r in records if r["kind"] == "failed"]
    out += [f"- {r['devices']} devices: skipped ({r['why']})" for r in records
            if r["kind"] == "skipped"]
    one = find(records, "row", devices=1)
    for r in rows_of(records):
        if one and abs(r["first_loss"] - one["first_loss"]) > 1e-4 * abs(one["first_loss"]):
            out.append(f"- {r['devices']} devices {r['mode']} {r['layout']}: first loss "
                       f"{r['first_loss']:.6f}, 1 device {one['first_loss']:.6f}")
    return out


def report(records: list[dict]) -> list[str]:
    """Everything printed after the header: tables, verdicts, notes."""
    machines = sorted({f"{r['platform']} ({r['device_kind']}), jax {r['jax']}"
                       for r in records if r["kind"] == "machine"})
    lines = [f"Devices: {'; '.join(machines) or 'none'}; {os.cpu_count()} CPU cores.", ""]
    lines += table(records) + [""]
    searched = search_table(records)
    lines += searched + ([""] if searched else [])
    lines += ["Goals:"] + verdicts(records)
    extra = notes(records)
    return lines + (["", "Notes:"] + extra if extra else [])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4")
    parser.add_argument("--modes", default="eager,partial,xla")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row")
    parser.add_argument("--budget-mib", type=float, default=128.0)
    parser.add_argument("--search", default="1,4", help="device counts to run the search on")
    parser.add_argument("--widths", default="128,256,512", help="widths the search fits on")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: devices 1,4, 2 steps, the search at 64 MiB")
    parser.add_argument("--json", type=Path, default=None, help="also write the records here")
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.steps, args.budget_mib, args.widths = "1,4", 2, 64.0, "128,256,384"
    command = "python -m benchmarks.sharded " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"## Sharded training of the GPT workload ({dt.date.today().isoformat()})\n\n"
          f"Command: `{command.strip()}`" + (" (quick: not for quoting)" if args.quick else "")
          + "\n", flush=True)
    started = time.time()
    devices = [int(n) for n in args.devices.split(",")]
    records = measure_all(devices, args.modes.split(","), args.steps, args.budget_mib,
                          [int(n) for n in args.search.split(",") if int(n) in devices],
                          args.widths, args.quick)
    print("\n".join(report(records)))
    print(f"\nVirtual CPU devices share this machine's {os.cpu_count()} cores: step times are "
          f"indicative only. Total {time.time() - started:.0f} s.")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
