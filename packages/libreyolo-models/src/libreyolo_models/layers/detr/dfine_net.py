"""The D-FINE network and its size table, shared by three families with one state-dict layout:
D-FINE (ReLU decoder, frozen stem), DEIM (SiLU decoder) and RT-DETRv4 (SiLU decoder, frozen stem).

HGNetv2 backbone -> GELAN hybrid encoder -> fine-grained-distribution decoder. Keys start with
``backbone.``, ``encoder.``, ``decoder.`` in upstream's order, so upstream checkpoints load
unchanged. The two halves are methods because training captures only the first: ``features``
(backbone + encoder) and the decoder, whose denoising queries follow each batch's boxes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor, nn

from .denoising import DenoisingQueries
from .elan_encoder import ELANHybridEncoder
from .fdr_decoder import FDRConfig, FDRDecoder
from .hgnetv2 import HGNetv2


@dataclass(frozen=True)
class DFINESize:
    """One size (upstream's size table, itself the official configs).

    Attributes:
        arch, lab, frozen_norm: HGNetv2 arch, learnable affines, frozen norms.
        returned: backbone stages fed to the encoder (n: the two coarsest).
        enc_dim, enc_ffn, expansion, depth_mult: encoder width, attention FFN, GELAN widths/depths.
        depth, points, dec_dim, dec_ffn, reg_scale: decoder layers, sampling points per level,
            width, feed-forward width, and the distribution's offset scale.
    """

    arch: str
    lab: bool
    frozen_norm: bool
    returned: tuple[int, ...]
    enc_dim: int
    enc_ffn: int
    expansion: float
    depth_mult: float
    depth: int
    points: tuple[int, ...]
    dec_dim: int = 256
    dec_ffn: int = 1024
    reg_scale: float = 4.0

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(4 * 2**i for i in self.returned)


SIZES: dict[str, DFINESize] = {
    "n": DFINESize("B0", True, False, (2, 3), 128, 512, 0.34, 0.5, 3, (6, 6), dec_dim=128, dec_ffn=512),
    "s": DFINESize("B0", True, False, (1, 2, 3), 256, 1024, 0.5, 0.34, 3, (3, 6, 3)),
    "m": DFINESize("B2", True, False, (1, 2, 3), 256, 1024, 1.0, 0.67, 4, (3, 6, 3)),
    "l": DFINESize("B4", False, True, (1, 2, 3), 256, 1024, 1.0, 1.0, 6, (3, 6, 3)),
    # x: a 384-wide encoder feeding the 256-wide decoder through its own input projections.
    "x": DFINESize("B5", False, True, (1, 2, 3), 384, 2048, 1.0, 1.0, 6, (3, 6, 3), reg_scale=8.0),
}
NUM_QUERIES = 300


class DFINENet(nn.Module):
    """D-FINE-architecture detector of ``size`` for ``nc`` classes, built for ``imgsz`` (H, W).

    Args:
        act: the decoder's activation (D-FINE ``"relu"``; DEIM and RT-DETRv4 ``"silu"``).
        freeze_stem: the backbone stem does not train (D-FINE and RT-DETRv4).
        imgsz: the input size the decoder's ``anchors``/``valid_mask`` buffers are built for; other
            sizes run too (their anchors are generated on the fly).
        num_queries: queries selected from the encoder (``decoder.num_queries`` may change later).
    """

    def __init__(self, size: str, nc: int = 80, *, act: str = "relu", freeze_stem: bool = True,
                 imgsz: tuple[int, int] = (640, 640), num_queries: int = NUM_QUERIES) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"no D-FINE-architecture size {size!r}; sizes: {', '.join(SIZES)}")
        v = SIZES[size]
        self.size, self.nc = size, nc
        self.backbone = HGNetv2(v.arch, v.returned, lab=v.lab, frozen_norm=v.frozen_norm, freeze_stem=freeze_stem)
        self.encoder = ELANHybridEncoder(self.backbone.out_channels, v.enc_dim, ffn=v.enc_ffn, expansion=v.expansion,
                                         depth_mult=v.depth_mult, attend=len(v.returned) - 1)
        cfg = FDRConfig(feat_channels=(v.enc_dim,) * len(v.returned), strides=v.strides, dim=v.dec_dim, ffn=v.dec_ffn, depth=v.depth, points=v.points, reg_scale=v.reg_scale,
                        num_queries=num_queries, act=act, mlp_act=act, imgsz=imgsz)
        self.decoder = FDRDecoder(nc, cfg)

    def features(self, images: Tensor) -> list[Tensor]:
        """The training-capture prefix: ``[B, 3, H, W]`` in [0, 1] -> the encoder's maps."""
        return self.encoder(self.backbone(images))

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        """``pred_logits [B, Q, nc]`` (raw) and ``pred_boxes [B, Q, 4]`` (cx, cy, w, h, normalised),
        queries in encoder top-k order. The same in train and eval mode."""
        return self.decoder(self.features(images))

    def forward_train(self, features: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """The eager training remainder (see ``FDRDecoder.forward_train``)."""
        return self.decoder.forward_train(features, denoising)


def infer_size(state: Mapping[str, Tensor]) -> str | None:
    """A bare state dict's size: the encoder's width (n 128, x 384), else its first input's
    (s 256, m 384, l 512: the backbone's stage-2 width)."""
    lateral = state.get("encoder.lateral_convs.0.conv.weight")
    first = state.get("encoder.input_proj.0.conv.weight")
    if lateral is None or first is None:
        return None
    width = int(lateral.shape[1])
    if width != 256:
        return {128: "n", 384: "x"}.get(width)
    return {256: "s", 384: "m", 512: "l"}.get(int(first.shape[1]))
