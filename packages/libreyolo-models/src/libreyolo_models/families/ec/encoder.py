"""EC's hybrid encoder: a transformer layer on the stride-32 map, then a CSP-PAN that sums (not
concatenates) the upsampled or downsampled map with the lateral one before each ELAN fusion.

No input projections (the backbone's adapter already gives ``hidden`` channels). The stride-32
tokens get a 2D sine-cosine position embedding; it is computed from the map's size on every call
(upstream precomputes the same values for its build size and reads them in eval mode).
Module names are upstream's checkpoint keys.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.detr.aifi import TransformerEncoder
from ...layers.detr.position import sincos_position_embedding
from .blocks import ConvNorm, RepNCSPELAN4, SCDown
from .variants import ENCODER_HEADS, Variant


class HybridEncoder(nn.Module):
    """Three maps of ``hidden`` channels at strides 8, 16, 32 -> three fused maps, same shapes."""

    def __init__(self, v: Variant) -> None:
        super().__init__()
        hidden = v.hidden
        if hidden % 4:
            raise ValueError(f"the encoder width {hidden} must be divisible by 4 (sine-cosine positions)")
        self.hidden = hidden
        self.encoder = nn.ModuleList([TransformerEncoder(hidden, ENCODER_HEADS, v.encoder_ffn, activation=F.silu)])
        c4 = round(v.expansion * hidden // 2)
        blocks = round(3 * v.depth_mult)
        self.lateral_convs = nn.ModuleList(ConvNorm(hidden, hidden, 1, 1) for _ in range(2))
        self.fpn_blocks = nn.ModuleList(RepNCSPELAN4(hidden, hidden, 2 * hidden, c4, blocks) for _ in range(2))
        self.downsample_convs = nn.ModuleList(nn.Sequential(SCDown(hidden, hidden)) for _ in range(2))
        self.pan_blocks = nn.ModuleList(RepNCSPELAN4(hidden, hidden, 2 * hidden, c4, blocks) for _ in range(2))

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        feats = list(feats)
        top = feats[2]
        h, w = top.shape[-2:]
        tokens = top.flatten(2).permute(0, 2, 1)
        # int(): an export (fixed-size for EC) stores the embedding as a constant, as upstream's does.
        pos = sincos_position_embedding(int(w), int(h), self.hidden, device=top.device).to(tokens.dtype)
        feats[2] = self.encoder[0](tokens, pos).permute(0, 2, 1).reshape(-1, self.hidden, h, w).contiguous()
        # Top-down: each coarser map, through its lateral conv, upsampled onto the finer one.
        inner = [feats[2]]
        for k, idx in enumerate((2, 1)):
            high = self.lateral_convs[k](inner[0])
            inner[0] = high
            inner.insert(0, self.fpn_blocks[k](F.interpolate(high, scale_factor=2.0, mode="nearest") + feats[idx - 1]))
        # Bottom-up: each finer output, downsampled onto the next top-down map.
        outs = [inner[0]]
        for k in range(2):
            outs.append(self.pan_blocks[k](self.downsample_convs[k](outs[-1]) + inner[k + 1]))
        return outs
