"""Run every parity case on one side and write the results to a JSON file.

`python runner.py megengine OUT` runs them in real MegEngine (on MegEngine's own interpreter);
`python runner.py project OUT` runs them in this project, `megengine*` served by `aliases.py`.
A case's result is what it returned, or `{"raised": <exception class>, "message": ...}`.
Arrays travel as `{"array": <nested list>, "dtype": ..., "shape": ...}` (JSON, not pickle:
the two sides have different numpy versions).
"""

from __future__ import annotations

import json
import os
import sys
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


def run(side: str) -> dict[str, Any]:
    if side == "project":
        import aliases

        aliases.install()
    results = {}
    for name, fn in cases.load_all().items():
        if side == "megengine" and cases.OPTIONS[name]["megengine_aborts"]:
            results[name] = {"raised": "process abort", "message": "not run: MegEngine aborts"}
            continue
        try:
            results[name] = {"value": encode(fn())}
        except Exception as e:  # noqa: BLE001 - what raises is part of the comparison
            results[name] = {"raised": type(e).__name__, "message": str(e)[:300]}
    return results


if __name__ == "__main__":
    with open(sys.argv[2], "w") as out:  # a file: MegEngine prints notices on stdout
        json.dump(run(sys.argv[1]), out)
