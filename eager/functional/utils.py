"""MegEngine's `megengine.functional.utils`: the older path of `metric.topk_accuracy` (MegEngine
1.13 keeps it, deprecated), for code that still imports it from here. Its private helpers
(`_assert_equal`, a check symbolic graphs carry) have no counterpart: compare values with
numpy's testing functions instead."""

from .metric import topk_accuracy

__all__ = ["topk_accuracy"]
