"""RT-DETR's hybrid encoder: attention within the coarsest level (AIFI), then CNN fusion across
levels (CCFM: a top-down then a bottom-up pass of CSP blocks built from RepVGG units).

Attention is spent only where it is cheap and pays most: on the stride-32 map (400 tokens at
640 px), whose features are the most semantic. The finer levels are fused by convolutions.
Module names are upstream's checkpoint keys (``input_proj``, ``encoder``, ``lateral_convs``,
``fpn_blocks``, ``downsample_convs``, ``pan_blocks``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.fuse import merge_parallel_convs
from .determinism import needs_deterministic_backward
from .norms import NORM_EPS, ConvNorm

AIFI_LEVEL = 2          # the encoder attends within the stride-32 level only
PE_TEMPERATURE = 10000.0
CCFM_BLOCKS = 3         # RepVGG units per CSP block


def sincos_position_embedding(w: int, h: int, dim: int, *, device: torch.device,
                              temperature: float = PE_TEMPERATURE) -> Tensor:
    """Fixed 2-D sine-cosine embedding ``float32 [1, h * w, dim]`` for a ``h x w`` token grid.

    Built from ``arange`` on ``device`` (no host-to-device copy), so it is safe inside a CUDA
    graph. The grid is enumerated column-major (x outer, y inner) while tokens are row-major:
    upstream's (and the official) convention, which trained weights depend on.
    """
    if dim % 4:
        raise ValueError(f"position embedding width {dim} must be a multiple of 4")
    grid_w, grid_h = torch.meshgrid(torch.arange(w, dtype=torch.float32, device=device),
                                    torch.arange(h, dtype=torch.float32, device=device), indexing="ij")
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float32, device=device) / quarter)
    out_w = grid_w.flatten()[:, None] * omega[None]
    out_h = grid_h.flatten()[:, None] * omega[None]
    return torch.cat((out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()), 1)[None]


class EncoderLayer(nn.Module):
    """Post-norm transformer encoder layer (self-attention with position embedding, GELU FFN)."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, src: Tensor, pos: Tensor) -> Tensor:
        q = k = src + pos
        # need_weights=True takes plain matmul + softmax (deterministic backward); else fused SDPA.
        src = self.norm1(src + self.self_attn(q, k, src, need_weights=needs_deterministic_backward(src))[0])
        return self.norm2(src + self.linear2(F.gelu(self.linear1(src))))


class TransformerEncoder(nn.Module):
    """A stack of encoder layers (one in every RT-DETR size)."""

    def __init__(self, dim: int, heads: int, ffn: int, depth: int = 1) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, ffn) for _ in range(depth))

    def forward(self, src: Tensor, pos: Tensor) -> Tensor:
        for layer in self.layers:
            src = layer(src, pos)
        return src


class RepVggBlock(nn.Module):
    """``act(bn(3x3(x)) + bn(1x1(x)))``: two branches in training, one 3x3 after ``fuse()``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(channels, channels, 3, 1, padding=1)
        self.conv2: ConvNorm | None = ConvNorm(channels, channels, 1, 1, padding=0)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv1(x) if self.conv2 is None else self.conv1(x) + self.conv2(x)
        return F.silu(y)

    def fuse_for_inference(self) -> bool:
        """Merge the (already folded) 1x1 branch into the 3x3 one."""
        if self.conv2 is None or not isinstance(self.conv2.norm, nn.Identity):
            return False
        merge_parallel_convs(self.conv1.conv, self.conv2.conv)
        self.conv2 = None
        return True


class CSPRepLayer(nn.Module):
    """Cross-stage-partial block: one 1x1 path through the RepVGG units, one straight 1x1 path,
    summed, then projected to ``c_out`` (no projection when the widths already agree)."""

    def __init__(self, c_in: int, c_out: int, blocks: int, expansion: float) -> None:
        super().__init__()
        hidden = int(c_out * expansion)
        self.conv1 = ConvNorm(c_in, hidden, 1, 1, act=nn.SiLU)
        self.conv2 = ConvNorm(c_in, hidden, 1, 1, act=nn.SiLU)
        self.bottlenecks = nn.Sequential(*(RepVggBlock(hidden) for _ in range(blocks)))
        self.conv3 = ConvNorm(hidden, c_out, 1, 1, act=nn.SiLU) if hidden != c_out else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(self.bottlenecks(self.conv1(x)) + self.conv2(x))


class HybridEncoder(nn.Module):
    """Backbone maps (strides 8, 16, 32) -> three fused maps of ``dim`` channels, same strides."""

    def __init__(self, in_channels: list[int], dim: int, heads: int, ffn: int, expansion: float) -> None:
        super().__init__()
        self.dim = dim
        levels = len(in_channels)
        self.input_proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, dim, 1, bias=False), nn.BatchNorm2d(dim, eps=NORM_EPS)) for c in in_channels)
        self.encoder = nn.ModuleList([TransformerEncoder(dim, heads, ffn)])
        self.lateral_convs = nn.ModuleList(ConvNorm(dim, dim, 1, 1, act=nn.SiLU) for _ in range(levels - 1))
        self.fpn_blocks = nn.ModuleList(CSPRepLayer(2 * dim, dim, CCFM_BLOCKS, expansion) for _ in range(levels - 1))
        self.downsample_convs = nn.ModuleList(ConvNorm(dim, dim, 3, 2, act=nn.SiLU) for _ in range(levels - 1))
        self.pan_blocks = nn.ModuleList(CSPRepLayer(2 * dim, dim, CCFM_BLOCKS, expansion) for _ in range(levels - 1))

    def attend(self, feat: Tensor) -> Tensor:
        """AIFI: self-attention over the tokens of one level, with the fixed position embedding."""
        b, _, h, w = feat.shape
        tokens = feat.flatten(2).permute(0, 2, 1)
        pos = sincos_position_embedding(w, h, self.dim, device=feat.device).to(tokens.dtype)
        memory = self.encoder[0](tokens, pos)
        return memory.permute(0, 2, 1).reshape(b, self.dim, h, w).contiguous()

    def forward(self, feats: list[Tensor]) -> list[Tensor]:
        proj = [p(f) for p, f in zip(self.input_proj, feats)]
        proj[AIFI_LEVEL] = self.attend(proj[AIFI_LEVEL])
        # Top-down: each coarser map, laterally projected, is upsampled and fused with the finer one.
        inner = [proj[-1]]
        for j, low in enumerate(reversed(proj[:-1])):
            high = self.lateral_convs[j](inner[0])
            inner[0] = high
            up = F.interpolate(high, scale_factor=2.0, mode="nearest")
            inner.insert(0, self.fpn_blocks[j](torch.cat((up, low), 1)))
        # Bottom-up: each finer result is downsampled and fused with the next lateral map.
        outs = [inner[0]]
        for j, high in enumerate(inner[1:]):
            outs.append(self.pan_blocks[j](torch.cat((self.downsample_convs[j](outs[-1]), high), 1)))
        return outs
