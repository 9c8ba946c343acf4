"""The `make.py` scripts here regenerate the fixtures with real MegEngine or torch: scripts, not
test modules, so `--doctest-modules` must not import them where neither is installed.

pytest puts this folder on `sys.path` (for this file), so no folder here may be named like an
importable package: a `torch/` here was imported as `torch` where torch is not installed.
"""

collect_ignore_glob = ["*/make.py"]
