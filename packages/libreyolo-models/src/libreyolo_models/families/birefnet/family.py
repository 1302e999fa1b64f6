"""BiRefNet's implementation of the family contract: network, seams (with the segmented graph
path's stages), loss and post-processing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...errors import CheckpointError, ConfigError
from .loss import LOSS_NAMES, pixel_losses
from .nn import ARCHS, BiRefNet
from .swin import SWIN

_EMBED_KEY = "bb.patch_embed.proj.weight"


class BiRefNetFamily(Family):
    """BiRefNet alpha mattes, Swin-T (lite) and Swin-L."""

    def build_network(self) -> nn.Module:
        spec = self.spec
        if spec.mean is None or spec.std is None:
            raise ValueError(f"{spec.name}: BiRefNet needs the input normalisation (mean/std) in its spec")
        if self.size not in ARCHS:
            raise ValueError(f"BiRefNet has no size {self.size!r}; sizes: {', '.join(ARCHS)}")
        return BiRefNet(ARCHS[self.size], spec.mean, spec.std)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if _EMBED_KEY not in state:
            raise CheckpointError(f"not a BiRefNet state dict: {_EMBED_KEY!r} is missing")
        return 1

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        """The patch embedding's width tells the backbones apart (96: Swin-T, 192: Swin-L)."""
        if _EMBED_KEY not in state:
            return None
        width = int(state[_EMBED_KEY].shape[0])
        return next((size for size, arch in ARCHS.items() if SWIN[arch.backbone].embed_dim == width), None)

    @classmethod
    def remap_state(cls, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Official training files may carry DDP's ``module.`` and ``torch.compile``'s ``_orig_mod.``
        prefixes (the official ``check_state_dict`` strips both, in that order): stripped here too."""
        out = {}
        for key, value in state.items():
            for prefix in ("module.", "_orig_mod."):
                key = key.removeprefix(prefix)
            out[key] = value
        return out

    # Graph seams -------------------------------------------------------------------------
    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, S, S]`` in [0, 1] -> the alpha ``[B, S, S]`` in [0, 1] (sigmoid of the finest map)."""
        return _alpha(*net(images))

    def inference_stages(self, net: nn.Module) -> list[tuple[Callable[..., Any], bool, str]] | None:
        """``inference_forward`` as stages for the segmented graph path: the network's plain stages
        (graphable) around its deformable samplings (eager); the last also takes the sigmoid. None
        for a network that is not the plain BiRefNet (a wrapped or converted copy): one graph then."""
        if not isinstance(net, BiRefNet):
            return None
        stages = list(net.stages())
        last, graphed, name = stages[-1]
        stages[-1] = (lambda *state: _alpha(*last(*state)), graphed, name)
        return stages

    def training_forward(self, net: nn.Module, images: Tensor) -> tuple[Tensor, ...]:
        """The four logit maps, coarse to fine (all supervised).

        Raises:
            ConfigError: a training batch of one image (per rank): the ASPP's global-pool branch
                normalises a ``1 x 1`` map with BatchNorm, which needs two values per channel (the
                official code swaps in no BatchNorm for batch 1, and its checkpoints have it).
        """
        if net.training and images.shape[0] < 2:
            raise ConfigError(f"BiRefNet trains with at least 2 images per batch (per GPU), got {images.shape[0]}: "
                              "its decoder's global-pool branch uses BatchNorm over a 1x1 map; use batch=2 or more")
        return net(images)

    def compute_loss(self, outputs: tuple[Tensor, ...], targets: Tensor, ctx: LossContext) -> LossResult:
        gains = {**self.spec.task(self.task).loss_gains, **ctx.gains}
        terms = pixel_losses(outputs, targets)
        total = sum((terms[n] * float(gains[n]) for n in LOSS_NAMES), outputs[-1].new_zeros((), dtype=torch.float32))
        items = torch.stack([terms[n].detach().float() * float(gains[n]) for n in LOSS_NAMES])
        return LossResult(total, items)

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        """One ``float32 [S, S]`` alpha per image (network resolution)."""
        return list(outputs.float().unbind(0))

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """Alpha mattes for the parity tool's step: ``float32 [batch, 1, imgsz, imgsz]`` in [0, 1]."""
        return torch.rand((batch, 1, imgsz, imgsz), generator=generator)


def _alpha(*maps: Tensor) -> Tensor:
    return maps[-1].sigmoid().squeeze(1)
