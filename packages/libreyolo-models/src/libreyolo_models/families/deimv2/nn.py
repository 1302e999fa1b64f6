"""The DEIMv2 network: backbone -> encoder -> RMSNorm fine-grained-distribution decoder, built
from ``layers.detr`` per the size table. Keys ``backbone.``, ``encoder.``, ``decoder.``: upstream's
``LibreDEIMv2Model``.

Sizes s-x read ImageNet-normalised input (their ViT's convention); the network normalises the
[0, 1] images it gets itself (non-persistent constants, inside any captured graph), and
``upstream_outputs`` takes upstream's normalised input instead.
"""

from __future__ import annotations

from torch import Tensor, nn

from ...layers.detr.denoising import DenoisingQueries
from ...layers.detr.elan_encoder import ELANHybridEncoder, LiteEncoder
from ...layers.detr.fdr_decoder import FDRConfig, FDRDecoder
from ...layers.detr.hgnetv2 import HGNetv2
from ...layers.detr.vit import ViTAdapter
from ...layers.normalize import InputNormalize
from .sizes import SIZES

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _backbone(size: str) -> nn.Module:
    v = SIZES[size]
    if v.backbone == "tiny":
        return ViTAdapter("tiny", v.returned, dim=v.vit_dim, heads=v.vit_heads, inplanes=v.inplanes)
    if v.dino:
        return ViTAdapter(v.backbone, v.returned, inplanes=v.inplanes, hidden=v.dim)
    return HGNetv2(v.backbone, v.returned, lab=True)


class DEIMv2Net(nn.Module):
    """DEIMv2 of ``size`` (atto, femto, pico, n, s, m, l, x) for ``nc`` classes, its anchor buffers
    built for ``imgsz`` (H, W)."""

    def __init__(self, size: str, nc: int = 80, *, imgsz: tuple[int, int] | None = None) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"DEIMv2 has no size {size!r}; sizes: {', '.join(SIZES)}")
        v = SIZES[size]
        self.size, self.nc = size, nc
        self.normalize: nn.Module = InputNormalize(IMAGENET_MEAN, IMAGENET_STD) if v.dino else nn.Identity()
        self.backbone = _backbone(size)
        channels: list[int] = list(self.backbone.out_channels)  # type: ignore[arg-type]
        if v.encoder == "lite":
            self.encoder: nn.Module = LiteEncoder(channels, v.dim, expansion=v.expansion, depth_mult=v.depth_mult)
            strides: tuple[int, ...] = (16, 32)
        else:
            self.encoder = ELANHybridEncoder(channels, v.dim, ffn=v.enc_ffn, expansion=v.expansion,
                                             depth_mult=v.depth_mult, attend=len(channels) - 1, block=v.encoder,
                                             fuse="sum")
            strides = tuple(self.backbone.out_strides)  # type: ignore[arg-type]
        cfg = FDRConfig(feat_channels=(v.dim,) * len(strides), strides=strides, dim=v.dim, ffn=v.dec_ffn,
                        depth=v.depth, points=v.points, num_queries=v.queries, act="silu", mlp_act="silu",
                        deimv2=True, gateway=not v.small, share_bbox_head=v.small, integer_reg_scale=not v.small,
                        imgsz=imgsz or (v.imgsz, v.imgsz))
        self.decoder = FDRDecoder(nc, cfg)

    def features(self, images: Tensor) -> list[Tensor]:
        """The training-capture prefix (the ViT included): images in [0, 1] -> the encoder's maps."""
        return self.encoder(self.backbone(self.normalize(images)))

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """``pred_logits [B, Q, nc]`` (raw) and ``pred_boxes [B, Q, 4]`` (cx, cy, w, h, normalised)."""
        return self.decoder(self.features(images))

    def upstream_outputs(self, x: Tensor) -> dict[str, Tensor]:
        """Upstream's eval outputs for upstream's input (ImageNet-normalised for s-x, [0, 1] else)."""
        return self.decoder(self.encoder(self.backbone(x)))

    def forward_train(self, features: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """The eager training remainder (see ``FDRDecoder.forward_train``)."""
        return self.decoder.forward_train(features, denoising)
