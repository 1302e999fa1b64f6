"""SAM's image encoder (``image_encoder.*``): a plain ViT over 16-pixel patches with windowed
attention in most blocks, global attention in four, decomposed relative positions in every block,
and a convolutional neck down to the 256-channel image embedding.

Layout facts from the official ``image_encoder.py`` / ``build_sam.py``: absolute positions
``pos_embed [1, 64, 64, width]`` (learned at 1024 px), per-block ``rel_pos_h/w [2 * side - 1,
head_dim]`` where side is 14 (the window) or 64 (global blocks), LayerNorm eps 1e-6, MLP ratio 4,
neck ``Conv1x1 -> LayerNorm2d -> Conv3x3 -> LayerNorm2d`` without biases. At another input size the
position tables are resampled (positions bicubically, relative tables linearly, as upstream does
for the latter), which only tests and experiments use: the published weights run at 1024.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PATCH = 16
WINDOW = 14
EMBED = 256  # the image embedding's channels (the prompt encoder's and mask decoder's width)


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of ``[B, C, H, W]`` (keys ``weight``, ``bias``)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class MLPBlock(nn.Module):
    """``lin2(act(lin1(x)))`` (keys ``lin1``, ``lin2``)."""

    def __init__(self, dim: int, hidden: int, act: type[nn.Module] = nn.GELU) -> None:
        super().__init__()
        self.lin1 = nn.Linear(dim, hidden)
        self.lin2 = nn.Linear(hidden, dim)
        self.act = act()

    def forward(self, x: Tensor) -> Tensor:
        return self.lin2(self.act(self.lin1(x)))


class PatchEmbed(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, width, kernel_size=PATCH, stride=PATCH)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).permute(0, 2, 3, 1)  # [B, H, W, C]


def relative_table(size_q: int, size_k: int, table: Tensor) -> Tensor:
    """``[size_q, size_k, head_dim]``: the table's row for every (query, key) offset, the table
    resampled linearly when it was learned for another side."""
    span = 2 * max(size_q, size_k) - 1
    if table.shape[0] != span:
        table = F.interpolate(table.t()[None], size=span, mode="linear")[0].t()
    q = torch.arange(size_q, device=table.device)[:, None] * max(size_k / size_q, 1.0)
    k = torch.arange(size_k, device=table.device)[None, :] * max(size_q / size_k, 1.0)
    offsets = (q - k) + (size_k - 1) * max(size_q / size_k, 1.0)
    return table[offsets.long()]


class Attention(nn.Module):
    """Multi-head self-attention over a ``[B, H, W, C]`` grid with decomposed relative positions
    (keys ``qkv``, ``proj``, ``rel_pos_h``, ``rel_pos_w``)."""

    def __init__(self, dim: int, heads: int, side: int) -> None:
        super().__init__()
        self.heads = heads
        head_dim = dim // heads
        self.scale = head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * side - 1, head_dim))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * side - 1, head_dim))

    def forward(self, x: Tensor) -> Tensor:
        b, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, b * self.heads, h * w, -1).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        rows, cols = relative_table(h, h, self.rel_pos_h), relative_table(w, w, self.rel_pos_w)
        grid_q = q.reshape(b * self.heads, h, w, -1)
        rel_h = torch.einsum("bhwc,hkc->bhwk", grid_q, rows)
        rel_w = torch.einsum("bhwc,wkc->bhwk", grid_q, cols)
        attn = (attn.view(-1, h, w, h, w) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]).view(-1, h * w, h * w)
        out = (attn.softmax(dim=-1) @ v).view(b, self.heads, h, w, -1).permute(0, 2, 3, 1, 4).reshape(b, h, w, -1)
        return self.proj(out)


def to_windows(x: Tensor, size: int) -> tuple[Tensor, tuple[int, int]]:
    """``[B, H, W, C]`` -> ``[B * n, size, size, C]`` windows (zero-padded bottom-right) and the padded side."""
    b, h, w, c = x.shape
    pad_h, pad_w = (size - h % size) % size, (size - w % size) % size
    if pad_h or pad_w:
        x = F.pad(x, (0, 0, 0, pad_w, 0, pad_h))
    hp, wp = h + pad_h, w + pad_w
    x = x.view(b, hp // size, size, wp // size, size, c).permute(0, 1, 3, 2, 4, 5)
    return x.contiguous().view(-1, size, size, c), (hp, wp)


def from_windows(windows: Tensor, size: int, padded: tuple[int, int], hw: tuple[int, int]) -> Tensor:
    """The inverse of ``to_windows``: the grid back, padding dropped."""
    hp, wp = padded
    b = windows.shape[0] // (hp * wp // size // size)
    x = windows.view(b, hp // size, wp // size, size, size, -1).permute(0, 1, 3, 2, 4, 5)
    x = x.contiguous().view(b, hp, wp, -1)
    h, w = hw
    return x[:, :h, :w, :].contiguous() if hp > h or wp > w else x


class Block(nn.Module):
    """Pre-norm transformer block; ``window`` 0 attends globally (keys ``norm1``, ``attn``,
    ``norm2``, ``mlp``)."""

    def __init__(self, dim: int, heads: int, window: int, grid: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, window if window else grid)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLPBlock(dim, 4 * dim)
        self.window = window

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x
        x = self.norm1(x)
        if self.window:
            hw = (x.shape[1], x.shape[2])
            x, padded = to_windows(x, self.window)
            x = from_windows(self.attn(x), self.window, padded, hw)
        else:
            x = self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class ImageEncoderViT(nn.Module):
    """``[B, 3, S, S]`` normalised pixels (S a multiple of 16; 1024 as published) ->
    ``[B, 256, S / 16, S / 16]`` image embedding."""

    def __init__(self, width: int, depth: int, heads: int, global_blocks: tuple[int, ...], grid: int = 64,
                 window: int = WINDOW) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(width)
        self.pos_embed = nn.Parameter(torch.zeros(1, grid, grid, width))
        self.blocks = nn.ModuleList(Block(width, heads, 0 if i in global_blocks else window, grid)
                                    for i in range(depth))
        self.neck = nn.Sequential(nn.Conv2d(width, EMBED, 1, bias=False), LayerNorm2d(EMBED),
                                  nn.Conv2d(EMBED, EMBED, 3, padding=1, bias=False), LayerNorm2d(EMBED))

    def positions(self, rows: int, cols: int) -> Tensor:
        """The absolute positions for a ``rows x cols`` patch grid (resampled if not the learned one)."""
        pos = self.pos_embed
        if pos.shape[1:3] == (rows, cols):
            return pos
        return F.interpolate(pos.permute(0, 3, 1, 2), size=(rows, cols), mode="bicubic",
                             align_corners=False).permute(0, 2, 3, 1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch_embed(x)
        x = x + self.positions(x.shape[1], x.shape[2])
        for block in self.blocks:
            x = block(x)
        return self.neck(x.permute(0, 3, 1, 2))
