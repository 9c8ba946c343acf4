"""xla_segments: pure jax, no Tensors. Given a pure function over arrays and abstract inputs,
compile its executables (forward with residuals, backward, inference-only forward).

Built in issue 3; it imports only jax.
"""
