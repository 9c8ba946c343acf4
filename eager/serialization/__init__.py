"""Checkpoints: `save` and `load` (MegEngine's `megengine.serialization`), one entry point for
every format read here: this project's own (`checkpoint_format`), MegEngine's and PyTorch's
legacy pickles (`pickle_reader`), PyTorch's zip (`torch_reader`) and safetensors
(`safetensors_io`), told apart by content (`files`). `layouts` converts the parameter layouts
MegEngine and PyTorch store in to this project's (`Module.load_state_dict`)."""

from .files import MAX_DEPTH, load, save

__all__ = ["save", "load", "MAX_DEPTH"]
