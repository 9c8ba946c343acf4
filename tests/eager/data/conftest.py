"""The `make.py` scripts here regenerate the fixtures with real MegEngine or torch: scripts, not
test modules, so `--doctest-modules` must not import them where neither is installed."""

collect_ignore_glob = ["*/make.py"]
