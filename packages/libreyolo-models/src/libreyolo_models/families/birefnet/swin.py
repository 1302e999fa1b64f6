"""Swin Transformer v1 as BiRefNet's backbone (``bb.*``): four stages, each stage's output normed.

The layout is the official Swin detection backbone's, which BiRefNet's checkpoints carry:
``patch_embed.proj`` (4x4 stride-4 conv) and ``patch_embed.norm``; ``layers.<i>.blocks.<j>``
with ``norm1``, ``attn.relative_position_bias_table`` / ``attn.relative_position_index`` (a
persistent buffer), ``attn.qkv``, ``attn.proj``, ``norm2``, ``mlp.fc1``, ``mlp.fc2``;
``layers.<i>.downsample.norm`` / ``.reduction`` (patch merging, stages 0-2); ``norm0..3``.
Odd blocks shift their windows by half a window; sides are padded to whole windows inside each
block and cut back after. Everything is computed from the input's shape on its device (the shift
mask too), so a graph of it holds no host data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.drop_path import DropPath


@dataclass(frozen=True)
class SwinArch:
    """One Swin size as data (the official ``swin_v1_*`` constructors)."""

    embed_dim: int
    depths: tuple[int, int, int, int]
    heads: tuple[int, int, int, int]
    window: int
    drop_path_rate: float = 0.2

    @property
    def widths(self) -> tuple[int, int, int, int]:
        d = self.embed_dim
        return d, 2 * d, 4 * d, 8 * d


SWIN = {
    "swin_v1_t": SwinArch(96, (2, 2, 6, 2), (3, 6, 12, 24), 7),
    "swin_v1_l": SwinArch(192, (2, 2, 18, 2), (6, 12, 24, 48), 12),
}


def window_partition(x: Tensor, window: int) -> Tensor:
    """``[B, H, W, C]`` (H, W multiples of ``window``) -> ``[B * nW, window * window, C]``."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, window * window, c)


def window_reverse(windows: Tensor, window: int, h: int, w: int) -> Tensor:
    """Inverse of :func:`window_partition`: ``[B * nW, window * window, C]`` -> ``[B, H, W, C]``."""
    c = windows.shape[-1]
    x = windows.view(-1, h // window, w // window, window, window, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


def shift_mask(hp: int, wp: int, window: int, shift: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``[nW, N, N]`` additive attention mask of shifted windows: -inf between tokens that came
    from different regions of the padded ``hp x wp`` map (the official nine-region labelling)."""
    # Band of a row (column): 0 before the last window, 1 in it before the shift, 2 in the shift;
    # region = 3 * row band + column band. Built without in-place writes, which the ONNX exporter
    # mis-wires when a network computes two masks of different sizes (BiRefNet's two scales).
    rows = torch.arange(hp, device=device)
    cols = torch.arange(wp, device=device)
    row_band = (rows >= hp - window).long() + (rows >= hp - shift).long()
    col_band = (cols >= wp - window).long() + (cols >= wp - shift).long()
    labels = (3 * row_band[:, None] + col_band[None, :]).float().view(1, hp, wp, 1)
    windows = window_partition(labels, window).squeeze(-1)
    diff = windows.unsqueeze(1) - windows.unsqueeze(2)
    return diff.masked_fill(diff != 0, float("-inf")).masked_fill(diff == 0, 0.0).to(dtype)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside one window, with a learned relative-position bias."""

    relative_position_index: Tensor

    def __init__(self, dim: int, window: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * window - 1) + rel[..., 1])  # a checkpoint key
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        bw, n, c = x.shape
        q, k, v = self.qkv(x).reshape(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = (q * self.scale) @ k.transpose(-2, -1) + bias.permute(2, 0, 1).unsqueeze(0).to(q.dtype)
        if mask is not None:
            windows = mask.shape[0]
            # -1, not bw // windows: an ONNX trace keeps the batch free only where no size is computed
            attn = (attn.view(-1, windows, self.heads, n, n) + mask[None, :, None]).view(-1, self.heads, n, n)
        return self.proj((attn.softmax(-1) @ v).transpose(1, 2).reshape(bw, n, c))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SwinBlock(nn.Module):
    """Pre-norm window attention (shifted when ``shift > 0``) and MLP, each residual."""

    def __init__(self, dim: int, heads: int, window: int, shift: int, drop_path: float) -> None:
        super().__init__()
        self.window, self.shift = window, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, heads)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x: Tensor, h: int, w: int, mask: Tensor | None) -> Tensor:
        b, _, c = x.shape
        win = self.window
        y = F.pad(self.norm1(x).view(b, h, w, c), (0, 0, 0, (win - w % win) % win, 0, (win - h % win) % win))
        hp, wp = y.shape[1], y.shape[2]
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = window_reverse(self.attn(window_partition(y, win), mask if self.shift else None), win, hp, wp)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + self.drop_path(y[:, :h, :w, :].reshape(b, h * w, c))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    """2x2 neighbours concatenated (odd sides padded), normed, projected to twice the width."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        b, _, c = x.shape
        x = F.pad(x.view(b, h, w, c), (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.reduction(self.norm(x.view(b, -1, 4 * c)))


class SwinStage(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, window: int, rates: list[float], merge: bool) -> None:
        super().__init__()
        self.window = window
        self.blocks = nn.ModuleList([SwinBlock(dim, heads, window, 0 if i % 2 == 0 else window // 2, rates[i])
                                     for i in range(depth)])
        self.downsample = PatchMerging(dim) if merge else None

    def forward(self, x: Tensor, h: int, w: int) -> tuple[Tensor, Tensor, int, int]:
        """-> (this stage's tokens, the next stage's input, its h, its w)."""
        win = self.window
        mask = shift_mask(-(-h // win) * win, -(-w // win) * win, win, win // 2, x.device, x.dtype)
        for block in self.blocks:
            x = block(x, h, w, mask)
        if self.downsample is None:
            return x, x, h, w
        return x, self.downsample(x, h, w), (h + 1) // 2, (w + 1) // 2


class PatchEmbed(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, 4, 4)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        x = self.proj(F.pad(x, (0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4)))
        b, c, gh, gw = x.shape
        return self.norm(x.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, c, gh, gw)


class SwinTransformer(nn.Module):
    """``[B, 3, H, W]`` normalised RGB -> four ``[B, C_i, H / 2^(i+2), W / 2^(i+2)]`` feature maps."""

    def __init__(self, arch: SwinArch) -> None:
        super().__init__()
        self.widths = arch.widths
        self.patch_embed = PatchEmbed(arch.embed_dim)
        total = sum(arch.depths)
        rates = [arch.drop_path_rate * i / (total - 1) for i in range(total)]  # the official linspace
        self.layers = nn.ModuleList()
        for i, (depth, heads) in enumerate(zip(arch.depths, arch.heads)):
            start = sum(arch.depths[:i])
            self.layers.append(SwinStage(self.widths[i], depth, heads, arch.window, rates[start:start + depth], i < 3))
        for i, width in enumerate(self.widths):
            self.add_module(f"norm{i}", nn.LayerNorm(width))  # official names: norm0..norm3

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x = self.patch_embed(x)
        # Plain ints: the token grid is laid out per input size (windows, shift masks), so a trace
        # (export) keeps it as constants rather than shape arithmetic the ONNX exporter mis-wires.
        h, w = int(x.shape[-2]), int(x.shape[-1])
        x = x.flatten(2).transpose(1, 2)
        outs = []
        for i, stage in enumerate(self.layers):
            out, x, nh, nw = stage(x, h, w)
            out = getattr(self, f"norm{i}")(out)
            outs.append(out.view(-1, h, w, self.widths[i]).permute(0, 3, 1, 2).contiguous())
            h, w = nh, nw
        return outs[0], outs[1], outs[2], outs[3]
