"""A DINOv2 vision transformer with the official (facebookresearch/dinov2) module names.

Facts from the official code as Depth Anything V2 vendors it (``depth_anything_v2/dinov2.py`` and
``dinov2_layers/``; see ``docs/families/depthanything.md``): patch embedding by a ``patch x
patch`` strided convolution; a class token; learned positions for a ``grid x grid`` patch layout
plus the class token; pre-norm blocks (LayerNorm eps 1e-6, multi-head attention with a fused
``qkv`` projection, biases on, softmax(q k^T / sqrt(d)) v), GELU MLP of 4x width, LayerScale
(``ls1.gamma``, ``ls2.gamma``) on both residual branches; a final LayerNorm. ``mask_token`` is
kept (a checkpoint key) and never used. No register tokens, no drop path at inference.

An input of another patch layout reads the positions resampled bicubically (no antialiasing)
with the official scale-factor form: the target grid plus 0.1, divided by the stored grid, as
``F.interpolate`` scale factors (which decide where the samples fall, not only the output size).
The layout the positions were learned at uses them as stored.

State-dict keys, in order: ``cls_token``, ``pos_embed``, ``mask_token``, ``patch_embed.proj.*``,
``blocks.<i>.{norm1, attn.qkv, attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma}``,
``norm.*``: the official checkpoints' (under the family's prefix, ``pretrained.`` in Depth
Anything). Treat them as a file format.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LN_EPS = 1e-6
POS_OFFSET = 0.1  # the official interpolate_offset


class PatchEmbed(nn.Module):
    """``patch x patch`` pixels -> one token (the official ``patch_embed.proj``)."""

    def __init__(self, patch: int, width: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, width, kernel_size=patch, stride=patch)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention with one fused ``qkv`` projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class LayerScale(nn.Module):
    """A learned per-channel scale of a residual branch (the official ``ls<i>.gamma``)."""

    def __init__(self, dim: int, init: float = 1.0) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block with LayerScale on both branches."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=LN_EPS)
        self.attn = Attention(dim, heads)
        self.ls1 = LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=LN_EPS)
        self.mlp = Mlp(dim, dim * mlp_ratio)
        self.ls2 = LayerScale(dim)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class DinoVisionTransformer(nn.Module):
    """DINOv2 ViT: ``[B, 3, H, W]`` (normalised; H, W multiples of ``patch``) -> tokens.

    Args:
        width: token width; depth: blocks; heads: attention heads.
        patch: pixels per patch side; grid: patches per side the positions were learned for.
    """

    def __init__(self, width: int, depth: int, heads: int, *, patch: int = 14, grid: int = 37) -> None:
        super().__init__()
        self.patch, self.grid = patch, grid
        # registration order = the official state-dict order: own parameters first, then children
        self.cls_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos_embed = nn.Parameter(torch.zeros(1, grid * grid + 1, width))
        self.mask_token = nn.Parameter(torch.zeros(1, width), requires_grad=False)  # pretraining only
        self.patch_embed = PatchEmbed(patch, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width, eps=LN_EPS)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def positions(self, rows: int, cols: int) -> Tensor:
        """``[1, 1 + rows * cols, C]`` position rows for a ``rows x cols`` patch layout."""
        if rows == cols == self.grid:
            return self.pos_embed
        table = self.pos_embed.float()
        grid = table[:, 1:].reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        scale = ((rows + POS_OFFSET) / self.grid, (cols + POS_OFFSET) / self.grid)
        grid = F.interpolate(grid, scale_factor=scale, mode="bicubic", antialias=False)
        if grid.shape[-2:] != (rows, cols):
            raise ValueError(f"position resampling gave a {tuple(grid.shape[-2:])} grid for {rows}x{cols} patches")
        flat = grid.permute(0, 2, 3, 1).reshape(1, rows * cols, -1)
        return torch.cat((table[:, :1], flat), dim=1).to(self.pos_embed.dtype)

    def tokens(self, x: Tensor) -> Tensor:
        """``[B, 3, H, W]`` -> ``[B, 1 + patches, C]``: class token first, positions added."""
        rows, cols = x.shape[-2] // self.patch, x.shape[-1] // self.patch
        tokens = self.patch_embed(x)
        tokens = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), tokens), dim=1)
        return tokens + self.positions(rows, cols)

    def intermediate_layers(self, x: Tensor, layers: Sequence[int]) -> list[tuple[Tensor, Tensor]]:
        """The outputs of blocks ``layers`` (0-based), each through the final norm, as
        ``(patch tokens [B, patches, C], class token [B, C])``."""
        wanted, out = set(layers), []
        tokens = self.tokens(x)
        for i, block in enumerate(self.blocks):
            tokens = block(tokens)
            if i in wanted:
                normed = self.norm(tokens)
                out.append((normed[:, 1:], normed[:, 0]))
        if len(out) != len(wanted):
            raise ValueError(f"layers {sorted(wanted)} are not all among the {len(self.blocks)} blocks")
        return out
