"""EfficientNetV2-B's implementation of the family contract (the shared classifier part plus its network)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.classifier import ClassifierFamily
from .nn import EfficientNetV2Net

# Blocks in the last stage (features.6) per size: 8 x depth multiplier, rounded up. B0..B3
# differ in depth, so the block count alone tells the size.
_LAST_STAGE_BLOCKS = {8: "b0", 9: "b1", 10: "b2", 12: "b3"}


class EfficientNetV2Family(ClassifierFamily):
    """EfficientNetV2-B0/B1/B2/B3 classify."""

    head_key = "classifier.1.weight"

    def build_network(self) -> nn.Module:
        return EfficientNetV2Net(self.size, self.nc, self.spec.mean, self.spec.std)  # type: ignore[arg-type]

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        blocks = {int(k.split(".")[2]) for k in state if k.startswith("features.6.")}
        return _LAST_STAGE_BLOCKS.get(max(blocks) + 1) if blocks else None
