"""`python -m partial.run_megengine [--shadow] SCRIPT ARGS...`: run a MegEngine script unchanged.

The script runs as `__main__` (as `python SCRIPT ARGS...` would run it, its folder first on
`sys.path`) with `import megengine...` served by this project (`alias_megengine`).
`-m MODULE` runs a module instead of a file, as `python -m` does.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

from .megengine_alias import alias_megengine


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and run the script or module with the alias installed."""
    parser = argparse.ArgumentParser(
        prog="python -m partial.run_megengine",
        description="Run a MegEngine program on this project, its imports unchanged.")
    parser.add_argument("--shadow", action="store_true",
                        help="serve this project even where a real MegEngine is installed")
    parser.add_argument("-m", dest="module", help="run a module (as python -m does)")
    parser.add_argument("script", nargs="?", help="the script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    options = parser.parse_args(argv)
    if (options.module is None) == (options.script is None):
        parser.error("give a SCRIPT or -m MODULE")
    alias_megengine(shadow=options.shadow)
    if options.module is not None:
        rest = [options.script, *options.args] if options.script else options.args
        sys.argv = [options.module, *rest]
        runpy.run_module(options.module, run_name="__main__", alter_sys=True)
        return
    script = Path(options.script)
    sys.argv = [str(script), *options.args]
    sys.path.insert(0, str(script.resolve().parent))
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
