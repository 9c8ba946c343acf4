"""The `cases_*.py` files import `parity_cases`, a name `cases.load_all()` gives them: they are
loaded through it, not collected (for their doctests) on their own."""

collect_ignore_glob = ["cases_*.py"]
