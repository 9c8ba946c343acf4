"""partial: capture and compile regions of eager code (`partial_trace`, `xla_trace`).

Built in issues 3 and 4 on top of `eager`, `xla_segments` and `autograd_bridge`.
"""
