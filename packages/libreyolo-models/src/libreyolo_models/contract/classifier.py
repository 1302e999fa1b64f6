"""The part of the family contract every image classifier shares: logits in, soft targets, softmax out.

A classifier family subclasses ``ClassifierFamily`` and says only how to build its network,
where its class outputs are (``head_key``, read for the class count and left fresh by
``train(pretrained=...)``) and how a bare state dict tells its size. Both graph seams are the whole
network (``float [B, 3, H, W]`` in [0, 1] -> logits ``float [B, nc]``; the network normalises
its input itself), so the captured training region is forward and backward of everything; the
loss (soft-target cross-entropy) is the eager remainder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import CheckpointError
from .family import Family, LossContext, LossResult


def soft_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean over the batch of ``-sum(targets * log_softmax(logits))``, in float32.

    Args:
        logits: ``float [B, nc]`` (fp16 under autocast: upcast here).
        targets: ``float [B, nc]`` rows summing to 1 (one-hot, mixed, smoothed).
    """
    return -(targets.float() * F.log_softmax(logits.float(), dim=1)).sum(dim=1).mean()


class ClassifierFamily(Family):
    """Shared implementation; subclasses set ``head_key`` and implement ``build_network``."""

    head_key: ClassVar[str]
    """State-dict key of the class-output weight, ``[nc, features]`` (``"fc.weight"``)."""

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if cls.head_key not in state:
            raise CheckpointError(f"not a state dict of this classifier: {cls.head_key!r} is missing")
        return int(state[cls.head_key].shape[0])

    def head_prefixes(self) -> tuple[str, ...]:
        return (self.head_key.rsplit(".", 1)[0] + ".",)

    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> logits ``[B, nc]``."""
        return net(images)

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        return net(images)

    def compute_loss(self, outputs: Tensor, targets: Tensor, ctx: LossContext) -> LossResult:
        """Soft-target cross-entropy, mean over this rank's batch (DDP's gradient average then
        makes it the mean over the global batch)."""
        gain = float(ctx.gains.get("cls", 1.0))
        loss = soft_cross_entropy(outputs, targets.to(outputs.device, non_blocking=True)) * gain
        return LossResult(loss, loss.detach().reshape(1))

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """Logits -> per image its softmax probabilities ``float32 [nc]``."""
        return list(outputs.float().softmax(dim=1))

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """One-hot targets ``float32 [batch, nc]`` of random classes."""
        labels = torch.randint(0, self.nc, (batch,), generator=generator)
        return F.one_hot(labels, self.nc).float()
