"""ConvNeXt's implementation of the family contract (the shared classifier part plus its network)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from ...contract.classifier import ClassifierFamily
from .nn import ConvNeXtNet


class ConvNeXtFamily(ClassifierFamily):
    """ConvNeXt-tiny/small/base classify."""

    head_key = "classifier.2.weight"

    def build_network(self) -> nn.Module:
        return ConvNeXtNet(self.size, self.nc, self.spec.mean, self.spec.std)  # type: ignore[arg-type]

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The stem's width separates base; the depth of stage 3 separates tiny from small."""
        stem = state.get("features.0.0.weight")
        if stem is None:
            return None
        if int(stem.shape[0]) == 128:
            return "base"
        return "small" if any(k.startswith("features.5.9.") for k in state) else "tiny"
