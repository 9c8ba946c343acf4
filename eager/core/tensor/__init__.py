"""MegEngine's `megengine.core.tensor`, for the one module MegEngine code imports from it:
`dtype`, the quantized dtypes (`from megengine.core.tensor.dtype import qint8`)."""
