"""The transform protocol (MegEngine's `megengine.data.transform.meta_transform`): `Transform`,
which maps one sample (`apply`) or a batch (`apply_batch`), and the identity `PseudoTransform`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any


class Transform(ABC):
    """A transform of one sample (`apply`) or of a batch of samples (`apply_batch`)."""

    def apply_batch(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(self.apply(one) for one in inputs)

    @abstractmethod
    def apply(self, input: Any) -> Any:
        """The transformed sample."""

    def __repr__(self) -> str:
        return type(self).__name__


class PseudoTransform(Transform):
    """The identity: returns each sample as it came."""

    def apply(self, input: Any) -> Any:
        return input


__all__ = ["Transform", "PseudoTransform"]
