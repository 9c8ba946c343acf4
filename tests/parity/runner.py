"""Run every parity case on one side and write the results to a JSON file.

`python runner.py megengine OUT` runs them in real MegEngine (on MegEngine's own interpreter);
`python runner.py project OUT` runs them in this project, `megengine*` served by `aliases.py`.
`python runner.py SIDE OUT NAME` runs case NAME alone: how an `isolated` case gets a process
of its own.
A case's result is what it returned, or `{"raised": <exception class>, "message": ...}`.
Arrays travel as `{"array": <nested list>, "dtype": ..., "shape": ...}` (JSON, not pickle:
the two sides have different numpy versions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases  # after the path: this file runs as a script on either interpreter


def encode(value: Any) -> Any:
    """`value` as JSON-ready data, arrays and numpy scalars marked with their dtype."""
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        data = np.where(np.isfinite(array), array, 0).tolist() if array.dtype.kind == "f" \
            else array.tolist()
        return {"array": data, "dtype": str(array.dtype), "shape": list(array.shape),
                "nonfinite": np.asarray(~np.isfinite(array)).tolist()
                if array.dtype.kind == "f" else None}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise TypeError(f"a case returned a {type(value).__name__}; return arrays and numbers")


def _alone(side: str, name: str) -> dict[str, Any]:
    """Case `name`'s result from a fresh process running only it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "alone.json")
        done = subprocess.run([sys.executable, os.path.abspath(__file__), side, out, name],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return {"raised": "process died", "message": done.stderr[-300:]}
        with open(out) as f:
            return json.load(f)[name]


def run(side: str, only: str = "") -> dict[str, Any]:
    if side == "project":
        import aliases

        aliases.install()
    results = {}
    for name, fn in cases.load_all().items():
        if only and name != only:
            continue
        if side == "megengine" and cases.OPTIONS[name]["megengine_aborts"]:
            results[name] = {"raised": "process abort", "message": "not run: MegEngine aborts"}
            continue
        if cases.OPTIONS[name]["isolated"] and not only:
            results[name] = _alone(side, name)
            continue
        try:
            results[name] = {"value": encode(fn())}
        except Exception as e:  # noqa: BLE001 - what raises is part of the comparison
            results[name] = {"raised": type(e).__name__, "message": str(e)[:300]}
    return results


if __name__ == "__main__":
    with open(sys.argv[2], "w") as out:  # a file: MegEngine prints notices on stdout
        json.dump(run(sys.argv[1], *sys.argv[3:4]), out)
