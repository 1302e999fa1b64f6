"""NAFNet's implementation of the family contract: network, graph seams, loss, post-processing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...errors import CheckpointError
from ...layers.tiles import tiled_apply
from .loss import psnr_loss
from .nn import ARCHS, NAFNet
from .postprocess import split_images


def tile_overlap(tile: int) -> int:
    """Pixels two neighbouring tiles share: an eighth of the tile, at least 8."""
    return max(8, tile // 8)


class NAFNetFamily(Family):
    """NAFNet restoration (denoise / deblur) at the official sizes and a tiny one for tests."""

    def build_network(self) -> nn.Module:
        if self.size not in ARCHS:
            raise ValueError(f"NAFNet has no size {self.size!r}; sizes: {', '.join(ARCHS)}")
        return NAFNet(ARCHS[self.size])

    @property
    def tile(self) -> int:
        """Side of the tiles inference cuts larger images into: the model's training crop."""
        return int(self.imgsz[0]) if self.imgsz else self.spec.default_imgsz(self.size, self.task)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if "intro.weight" not in state:
            raise CheckpointError("not a NAFNet state dict: 'intro.weight' is missing")
        return 1

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The intro's width and the block count of every level tell the sizes apart."""
        if "intro.weight" not in state:
            return None
        width = int(state["intro.weight"].shape[0])

        def blocks(prefix: str) -> tuple[int, ...]:
            found: dict[int, set[int]] = {}
            for key in state:
                match = re.match(rf"{prefix}\.(\d+)\.(\d+)\.", key)
                if match:
                    found.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
            return tuple(len(found[i]) for i in sorted(found))

        middle = len({key.split(".")[1] for key in state if key.startswith("middle_blks.")})
        for size, arch in ARCHS.items():
            if (arch.width, arch.enc_blocks, arch.middle_blocks, arch.dec_blocks) == (
                    width, blocks("encoders"), middle, blocks("decoders")):
                return size
        return None

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` in [0, 1] -> the restored ``[B, 3, H, W]``; images larger than the
        training crop (``tile``) go through the network in overlapping tiles of that size
        (``layers.tiles``), those that fit go through whole (the same computation as ``net``)."""
        return tiled_apply(net, images, self.tile, tile_overlap(self.tile))

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        return net(images)

    def compute_loss(self, outputs: Tensor, targets: Tensor, ctx: LossContext) -> LossResult:
        gain = float({**self.spec.task(self.task).loss_gains, **ctx.gains}["psnr"])
        total = psnr_loss(outputs, targets) * gain
        return LossResult(total, total.detach().float().reshape(1))

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return split_images(outputs)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """Clean images for the parity tool's step: ``float32 [batch, 3, imgsz, imgsz]`` in [0, 1]."""
        return torch.rand((batch, 3, imgsz, imgsz), generator=generator)
