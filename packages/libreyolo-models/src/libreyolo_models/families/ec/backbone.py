"""EC's backbone: a ViT (EdgeCrafter's ECViT) and the adapter that turns it into a pyramid.

The ViT embeds 16-pixel patches with a small conv pyramid (three stride-2 conv + BatchNorm + ReLU,
then a stride-2 conv), prepends one register token, and runs 12 pre-norm blocks whose attention
rotates queries and keys by 2D RoPE (patch tokens only; the register token is not rotated). The
adapter averages the outputs of the last two blocks (register token dropped) into a stride-16 map
and resamples it bilinearly to strides 8, 16 and 32; 1x1 conv + BatchNorm projections follow
(every level for l/x, only the stride-32 level for s/m).

Module names are upstream's checkpoint keys (``backbone.backbone.blocks.N.attn.qkv`` ...).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.rope import RopePositionEmbedding, apply_rope
from .blocks import ConvNorm
from .variants import PATCH, READ_LAYERS, VIT_DEPTH, Variant


class ConvPyramidPatchEmbed(nn.Module):
    """16-pixel patches from four stride-2 convolutions (the first three with BatchNorm and ReLU)."""

    def __init__(self, width: int, patch: int = PATCH) -> None:
        super().__init__()
        stages = int(math.log2(patch)) - 1
        channels = [width // 2**i for i in range(stages, 0, -1)]
        self.convs = nn.ModuleList(ConvNorm(c_in, c_out, 3, 2, act="relu")
                                   for c_in, c_out in zip([3] + channels[:-1], channels))
        self.proj = nn.Conv2d(channels[-1], width, kernel_size=3, stride=2, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        for conv in self.convs:
            x = conv(x)
        return self.proj(x)


class Attention(nn.Module):
    """Multi-head attention with RoPE on every token but the first (the register token)."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, width * 3)
        self.proj = nn.Linear(width, width)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        sin, cos = rope
        q = torch.cat((q[:, :, :1], apply_rope(q[:, :, 1:], sin, cos)), 2)
        k = torch.cat((k[:, :, :1], apply_rope(k[:, :, 1:], sin, cos)), 2)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block (LayerNorm eps 1e-6, GELU)."""

    def __init__(self, width: int, heads: int, ffn_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = Mlp(width, int(width * ffn_ratio))

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ECViT: returns the patch tokens after each block of ``READ_LAYERS``."""

    def __init__(self, width: int, heads: int, ffn_ratio: float) -> None:
        super().__init__()
        self.register_token = nn.Parameter(torch.zeros(1, 1, width))
        self.patch_embed = ConvPyramidPatchEmbed(width)
        self.blocks = nn.ModuleList(Block(width, heads, ffn_ratio) for _ in range(VIT_DEPTH))
        self.rope_embed = RopePositionEmbedding(width, heads)
        self._initialize()

    def _initialize(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.trunc_normal_(self.register_token, std=0.02)

    def forward(self, x: Tensor) -> list[Tensor]:
        """``[B, 3, H, W]`` -> ``[B, H/16 * W/16, C]`` patch tokens after each read layer."""
        tokens = self.patch_embed(x)
        h, w = tokens.shape[-2:]
        tokens = tokens.flatten(2).transpose(1, 2)
        tokens = torch.cat((self.register_token.expand(tokens.shape[0], -1, -1), tokens), 1)
        rope = self.rope_embed(int(h), int(w))
        outs = []
        for i, block in enumerate(self.blocks):
            tokens = block(tokens, rope)
            if i in READ_LAYERS:
                outs.append(tokens[:, 1:])
        return outs


class ViTAdapter(nn.Module):
    """The ViT and its pyramid: three maps at strides 8, 16, 32."""

    def __init__(self, v: Variant) -> None:
        super().__init__()
        self.backbone = VisionTransformer(v.vit_width, v.vit_heads, v.vit_ffn_ratio)
        dims = [v.proj_dim] * 3 if v.proj_dim is not None else [v.vit_width]
        self.projector = nn.ModuleList(ConvNorm(v.vit_width, dim, 1, 1) for dim in dims)

    def forward(self, x: Tensor) -> list[Tensor]:
        b, _, height, width = x.shape
        gh, gw = height // PATCH, width // PATCH
        fused = torch.stack(self.backbone(x)).mean(0).transpose(1, 2).reshape(b, -1, gh, gw)
        maps = [F.interpolate(fused, size=(int(gh * 2.0 ** (1 - i)), int(gw * 2.0 ** (1 - i))), mode="bilinear",
                              align_corners=False) for i in range(3)]
        if len(self.projector) == 1:
            maps[-1] = self.projector[0](maps[-1])
        else:
            maps = [proj(m) for proj, m in zip(self.projector, maps)]
        return maps
