"""SegFormer's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...contract.family import NORM_TYPES, Family, LossContext, LossResult
from ...contract.targets import IGNORE_INDEX
from ...errors import CheckpointError
from .loss import pixel_cross_entropy
from .nn import ARCHS, SegFormerNet
from .postprocess import split_class_maps

HEAD_LR_SCALE = 10.0  # the published recipe trains the freshly initialised decoder 10x faster
# MMSegmentation checkpoints carry the base decode head's unused classifier; it is not part of SegFormer.
_UNUSED_PREFIXES = ("decode_head.conv_seg.",)


class SegFormerFamily(Family):
    """SegFormer semantic segmentation, sizes b0-b5."""

    def build_network(self) -> nn.Module:
        spec = self.spec
        if spec.mean is None or spec.std is None:
            raise ValueError(f"{spec.name}: SegFormer needs the input normalisation (mean/std) in its spec")
        return SegFormerNet(self.size, self.nc, spec.mean, spec.std)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        key = "decode_head.linear_pred.weight"
        if key not in state:
            raise CheckpointError(f"not a SegFormer state dict: {key!r} is missing")
        return int(state[key].shape[0])

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The first stage's width and the block count per stage tell every size apart."""
        key = "backbone.patch_embed1.proj.weight"
        if key not in state:
            return None
        width = int(state[key].shape[0])
        depths = tuple(len({k.split(".")[2] for k in state if k.startswith(f"backbone.block{i}.")})
                       for i in range(1, 5))
        for size, arch in ARCHS.items():
            if arch.widths[0] == width and arch.depths == depths:
                return size
        return None

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return {k: v for k, v in state.items() if not k.startswith(_UNUSED_PREFIXES)}

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``int64 [B, H, W]`` class maps: the logits upsampled (bilinear) to
        the input and arg-maxed, all inside the captured graph."""
        logits = net(images)
        logits = F.interpolate(logits, size=images.shape[-2:], mode="bilinear", align_corners=False)
        return logits.argmax(1)

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, nc, H/4, W/4]`` logits (drop path and dropout active in train mode)."""
        return net(images)

    def compute_loss(self, outputs: Tensor, targets: Tensor, ctx: LossContext) -> LossResult:
        gain = float({**self.spec.task(self.task).loss_gains, **ctx.gains}["ce"])
        ce = pixel_cross_entropy(outputs, targets, world_size=ctx.world_size, normalizer_sum=ctx.normalizer_sum)
        total = ce * gain
        return LossResult(total, total.detach().reshape(1))

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return split_class_maps(outputs)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """Random class ids with about 5 % ignore pixels, ``uint8 [batch, imgsz, imgsz]``."""
        masks = torch.randint(0, self.nc, (batch, imgsz, imgsz), generator=generator, dtype=torch.uint8)
        ignore = torch.rand((batch, imgsz, imgsz), generator=generator) < 0.05
        return masks.masked_fill_(ignore, IGNORE_INDEX)

    # Training hooks ----------------------------------------------------------------------
    def parameter_groups(self, net: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
        """Encoder and decoder groups, each split into biases, norms (no decay) and weights; the
        decoder's learning rate is ``HEAD_LR_SCALE`` times the encoder's, as published."""
        groups: dict[str, list[nn.Parameter]] = {}
        for module_name, module in net.named_modules():
            part = "head" if module_name.startswith("decode_head") else "encoder"
            for name, param in module.named_parameters(recurse=False):
                if not param.requires_grad:
                    continue
                kind = "bias" if name == "bias" else "norm" if isinstance(module, NORM_TYPES) else "decay"
                groups.setdefault(f"{part}:{kind}", []).append(param)
        return [{"params": params, "weight_decay": weight_decay if key.endswith("decay") else 0.0,
                 "group": key.split(":")[1],  # the schedule reads "bias" (warmup from warmup_bias_lr)
                 **({"lr_scale": HEAD_LR_SCALE} if key.startswith("head") else {})}
                for key, params in sorted(groups.items())]
