"""ResNet's implementation of the family contract (the shared classifier part plus its network)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.classifier import ClassifierFamily
from .nn import ResNetNet


class ResNetFamily(ClassifierFamily):
    """ResNet-18/34/50/101 classify."""

    head_key = "fc.weight"

    def build_network(self) -> nn.Module:
        return ResNetNet(self.size, self.nc, self.spec.mean, self.spec.std)  # type: ignore[arg-type]

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """Bottleneck blocks have a third conv; the depth of stage 3 separates the rest."""
        if "conv1.weight" not in state:
            return None
        if "layer1.0.conv3.weight" in state:
            return "101" if any(k.startswith("layer3.22.") for k in state) else "50"
        return "34" if any(k.startswith("layer1.2.") for k in state) else "18"
