"""The SegFormer network: a Mix Transformer (MiT) encoder and the all-MLP decoder; tensors in,
logits out.

Architecture as published (Xie et al., 2021, "SegFormer: Simple and Efficient Design for
Semantic Segmentation with Transformers"): four stages, each an overlapping patch embedding (a
strided convolution plus LayerNorm) then transformer blocks whose self-attention shrinks keys and
values by a strided convolution (spatial reduction ``sr``), and whose feed-forward (Mix-FFN)
carries position through a 3x3 depthwise convolution instead of a positional embedding;
stochastic depth rises linearly over the blocks. The decoder projects each stage to one width
with a linear layer, upsamples to 1/4 of the input, concatenates, fuses with a 1x1 conv +
BatchNorm + ReLU and classifies each pixel.

Attribute names are checkpoint keys and follow the published SegFormer / MMSegmentation layout
(``backbone.patch_embed1.proj``, ``backbone.block1.0.attn.kv``, ``decode_head.linear_fuse.conv``
...), so the published ImageNet MiT encoders and ADE20K / Cityscapes models load without renaming:
treat them as a file format. No NMS, no ``.item()``, no data-dependent shape: exactly what a CUDA
graph captures. Input normalisation (ImageNet mean / std) is the first layer, inside the graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.drop_path import DropPath
from ...layers.fuse import fold_batchnorm
from ...layers.normalize import InputNormalize

BLOCK_NORM_EPS = 1e-6  # the published blocks' and stages' LayerNorm; patch embeddings and sr use torch's 1e-5


@dataclass(frozen=True)
class SegFormerArch:
    """One size as data: the published MiT-b<i> encoder plus its decoder width."""

    widths: tuple[int, int, int, int]       # channels per stage
    depths: tuple[int, int, int, int]       # transformer blocks per stage
    decoder_width: int                      # the all-MLP decoder's embedding width
    heads: tuple[int, int, int, int] = (1, 2, 5, 8)
    sr_ratios: tuple[int, int, int, int] = (8, 4, 2, 1)
    patch_sizes: tuple[int, int, int, int] = (7, 3, 3, 3)
    patch_strides: tuple[int, int, int, int] = (4, 2, 2, 2)
    mlp_ratio: int = 4
    drop_path_rate: float = 0.1             # stochastic depth of the last block (linear from 0)
    decoder_dropout: float = 0.1            # channel dropout before the classifier


_WIDE = (64, 128, 320, 512)
ARCHS: dict[str, SegFormerArch] = {
    "b0": SegFormerArch((32, 64, 160, 256), (2, 2, 2, 2), 256),
    "b1": SegFormerArch(_WIDE, (2, 2, 2, 2), 256),
    "b2": SegFormerArch(_WIDE, (3, 4, 6, 3), 768),
    "b3": SegFormerArch(_WIDE, (3, 4, 18, 3), 768),
    "b4": SegFormerArch(_WIDE, (3, 8, 27, 3), 768),
    "b5": SegFormerArch(_WIDE, (3, 6, 40, 3), 768),
}

OUTPUT_STRIDE = 4  # logits are at 1/4 of the input


def tokens_to_map(x: Tensor, h: int, w: int) -> Tensor:
    """``[B, h*w, C]`` tokens -> ``[B, C, h, w]``."""
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)


def map_to_tokens(x: Tensor) -> Tensor:
    """``[B, C, h, w]`` -> ``[B, h*w, C]`` tokens."""
    return x.flatten(2).transpose(1, 2)


class OverlapPatchEmbed(nn.Module):
    """A strided convolution whose kernel overlaps its neighbours' (7/4 first, then 3/2), then
    LayerNorm over channels: the stage's downsampling and its tokens."""

    def __init__(self, c_in: int, c_out: int, patch: int, stride: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(c_in, c_out, patch, stride, patch // 2)
        self.norm = nn.LayerNorm(c_out)

    def forward(self, x: Tensor) -> tuple[Tensor, int, int]:
        x = self.proj(x)
        h, w = x.shape[-2:]
        return self.norm(map_to_tokens(x)), h, w


class EfficientSelfAttention(nn.Module):
    """Multi-head self-attention whose keys and values come from a grid shrunk ``sr_ratio`` times
    per side (a strided conv + LayerNorm): attention costs ``N * N / sr^2`` instead of ``N^2``."""

    def __init__(self, dim: int, heads: int, sr_ratio: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not divisible by {heads} heads")
        self.heads, self.sr_ratio = heads, sr_ratio
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)  # keys and values in one layer, as the published weights store them
        self.proj = nn.Linear(dim, dim)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, sr_ratio, sr_ratio)
            self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        b, n, c = x.shape
        d = c // self.heads
        q = self.q(x).view(b, n, self.heads, d).transpose(1, 2)
        source = self.norm(map_to_tokens(self.sr(tokens_to_map(x, h, w)))) if self.sr_ratio > 1 else x
        k, v = self.kv(source).view(b, -1, 2, self.heads, d).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(d)) v; no attention dropout
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class DepthwiseConv(nn.Module):
    """3x3 depthwise convolution over the token grid (its own module: the published key is
    ``mlp.dwconv.dwconv``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        return map_to_tokens(self.dwconv(tokens_to_map(x, h, w)))


class MixFFN(nn.Module):
    """Linear -> 3x3 depthwise conv -> GELU -> linear: the conv leaks position between tokens,
    which is why MiT needs no positional embedding and accepts any input size."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dwconv = DepthwiseConv(hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        return self.fc2(F.gelu(self.dwconv(self.fc1(x), h, w)))


class MiTBlock(nn.Module):
    """Pre-norm transformer block; both residual branches pass through stochastic depth."""

    def __init__(self, dim: int, heads: int, sr_ratio: int, mlp_ratio: int, drop_path: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=BLOCK_NORM_EPS)
        self.attn = EfficientSelfAttention(dim, heads, sr_ratio)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=BLOCK_NORM_EPS)
        self.mlp = MixFFN(dim, dim * mlp_ratio)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), h, w))
        return x + self.drop_path(self.mlp(self.norm2(x), h, w))


class MixVisionTransformer(nn.Module):
    """The MiT encoder: four stages at strides 4, 8, 16, 32 -> four ``[B, C_i, H_i, W_i]`` maps.

    Stage ``i`` (1-based) is ``patch_embed<i>``, ``block<i>`` (a list of blocks) and ``norm<i>``;
    the names are the published checkpoints' keys.
    """

    def __init__(self, arch: SegFormerArch) -> None:
        super().__init__()
        blocks = sum(arch.depths)
        rates = [arch.drop_path_rate * i / max(blocks - 1, 1) for i in range(blocks)]  # linear from 0
        c_in, first = 3, 0
        for i in range(4):
            width = arch.widths[i]
            self.add_module(f"patch_embed{i + 1}", OverlapPatchEmbed(c_in, width, arch.patch_sizes[i],
                                                                     arch.patch_strides[i]))
            self.add_module(f"block{i + 1}", nn.ModuleList(
                MiTBlock(width, arch.heads[i], arch.sr_ratios[i], arch.mlp_ratio, rates[first + j])
                for j in range(arch.depths[i])))
            self.add_module(f"norm{i + 1}", nn.LayerNorm(width, eps=BLOCK_NORM_EPS))
            c_in, first = width, first + arch.depths[i]

    def forward(self, x: Tensor) -> list[Tensor]:
        features = []
        for i in range(1, 5):  # looked up per call, never cached: a swapped child (SyncBN...) is seen
            embed, blocks, norm = getattr(self, f"patch_embed{i}"), getattr(self, f"block{i}"), getattr(self, f"norm{i}")
            x, h, w = embed(x)
            for block in blocks:
                x = block(x, h, w)
            x = tokens_to_map(norm(x), h, w)
            features.append(x)
        return features


class TokenProjection(nn.Module):
    """One stage's linear projection to the decoder width (the published ``linear_c<i>.proj``)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(c_in, c_out)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        return tokens_to_map(self.proj(map_to_tokens(x)), h, w)


class ConvBNReLU(nn.Module):
    """1x1 conv (no bias) + BatchNorm + ReLU: the decoder's fusion (published ``linear_fuse.conv/bn``)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)))

    def fuse_for_inference(self) -> bool:
        """Fold ``bn`` into ``conv`` (``model.fuse()``; see ``layers.fuse``); True when something changed."""
        if not isinstance(self.bn, nn.BatchNorm2d):
            return False
        self.conv = fold_batchnorm(self.conv, self.bn)
        self.bn = nn.Identity()  # type: ignore[assignment]  # folded into conv
        return True


class AllMLPDecoder(nn.Module):
    """Project every stage to ``width``, upsample to the stride-4 grid, concatenate (deepest
    first, as published), fuse, drop channels, classify: ``[B, nc, H/4, W/4]`` logits."""

    def __init__(self, widths: tuple[int, ...], width: int, nc: int, dropout: float) -> None:
        super().__init__()
        for i, c in enumerate(widths):
            self.add_module(f"linear_c{i + 1}", TokenProjection(c, width))
        self.linear_fuse = ConvBNReLU(len(widths) * width, width)
        self.dropout = nn.Dropout2d(dropout)
        self.linear_pred = nn.Conv2d(width, nc, 1)
        self.levels = len(widths)

    def forward(self, features: list[Tensor]) -> Tensor:
        size = features[0].shape[-2:]
        maps = []
        for i in reversed(range(self.levels)):
            y = getattr(self, f"linear_c{i + 1}")(features[i])
            if y.shape[-2:] != size:
                y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
            maps.append(y)
        return self.linear_pred(self.dropout(self.linear_fuse(torch.cat(maps, dim=1))))


class SegFormerNet(nn.Module):
    """``[B, 3, H, W]`` RGB in [0, 1] (H, W multiples of 32) -> ``[B, nc, H/4, W/4]`` class logits."""

    def __init__(self, size: str, nc: int, mean: tuple[float, float, float], std: tuple[float, float, float]) -> None:
        super().__init__()
        if size not in ARCHS:
            raise ValueError(f"SegFormer has no size {size!r}; sizes: {', '.join(ARCHS)}")
        arch = ARCHS[size]
        self.normalize = InputNormalize(mean, std)
        self.backbone = MixVisionTransformer(arch)
        self.decode_head = AllMLPDecoder(arch.widths, arch.decoder_width, nc, arch.decoder_dropout)
        self.apply(_init_weights)
        # The classifier starts near zero (std 0.01, as MMSegmentation's decode heads do): the first
        # losses are then about log(nc), not the tens a He-initialised 1x1 conv over 256+ channels gives.
        nn.init.normal_(self.decode_head.linear_pred.weight, std=0.01)

    def forward(self, images: Tensor) -> Tensor:
        return self.decode_head(self.backbone(self.normalize(images)))


def _init_weights(module: nn.Module) -> None:
    """The published initialisation: truncated normal (std 0.02) linears, He-normal (fan-out)
    convolutions, zero biases, unit norms."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Conv2d):
        fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels // module.groups
        nn.init.normal_(module.weight, 0.0, (2.0 / fan_out) ** 0.5)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm | nn.BatchNorm2d):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
