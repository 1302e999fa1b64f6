"""MobileNetV4's implementation of the family contract (the shared classifier part plus its network)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.classifier import ClassifierFamily
from .nn import MobileNetV4Net


class MobileNetV4Family(ClassifierFamily):
    """MobileNetV4-Conv small/medium/large classify."""

    head_key = "classifier.weight"

    def build_network(self) -> nn.Module:
        return MobileNetV4Net(self.size, self.nc, self.spec.mean, self.spec.std)  # type: ignore[arg-type]

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Small opens with plain conv blocks, large with a 24-wide stem; medium is the rest."""
        stem = state.get("conv_stem.weight")
        if stem is None:
            return None
        if int(stem.shape[0]) == 24:
            return "large"
        return "small" if "blocks.0.0.conv.weight" in state else "medium"
