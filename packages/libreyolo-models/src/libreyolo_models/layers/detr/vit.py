"""DINOv3-style vision transformers with rotary position embeddings (DEIMv2 s to x), and the
spatial-prior adapter that turns their single-stride tokens into a three-level pyramid.

Two layouts, as upstream's checkpoints have them:
- :class:`TinyViT` (DEIMv2 s/m): keys ``_model.cls_token``, ``_model.patch_embed.proj``,
  ``_model.blocks.<i>``, ``_model.rope_embed.periods``; LayerNorm eps 1e-6; no final norm.
- :class:`DINOv3ViT` (DEIMv2 l/x, DINOv3 ViT-S and ViT-S+): a class token, four storage
  (register) tokens and a mask token, layer scale in every block, a masked key bias in the
  attention, a final norm; LayerNorm eps 1e-5; ViT-S+ has a SwiGLU feed-forward.

Both read patches of 16 pixels, so an input must be a multiple of 16 (32 for the detector). The
rotary embedding's ``periods`` is a persistent buffer (in every checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PATCH = 16


class RopeEmbedding(nn.Module):
    """2-D rotary position embedding: each patch's normalised (y, x) in [-1, 1] rotates pairs of
    query/key channels by angles ``2 pi coord / period`` (``periods`` spaced geometrically from
    ``base``). ``rescale``: in training, all coordinates are scaled by one log-uniform factor in
    ``[1/rescale, rescale]`` per call (DINOv3's augmentation)."""

    periods: Tensor

    def __init__(self, head_dim: int, *, base: float = 100.0, rescale: float | None = None) -> None:
        super().__init__()
        if head_dim % 4:
            raise ValueError(f"a rotary embedding needs a head width divisible by 4, not {head_dim}")
        self.rescale = rescale
        quarter = head_dim // 4
        self.register_buffer("periods", base ** (2 * torch.arange(quarter, dtype=torch.float32) / (head_dim // 2)))

    def forward(self, h: int, w: int) -> tuple[Tensor, Tensor]:
        """``(sin, cos)``, each ``float32 [h * w, head_dim]``."""
        dev = self.periods.device
        ys = torch.arange(0.5, h, device=dev, dtype=torch.float32) / h
        xs = torch.arange(0.5, w, device=dev, dtype=torch.float32) / w
        coords = 2.0 * torch.stack(torch.meshgrid(ys, xs, indexing="ij"), -1).flatten(0, 1) - 1.0
        if self.training and self.rescale is not None:
            bound = math.log(self.rescale)
            coords = coords * torch.empty(1, device=dev).uniform_(-bound, bound).exp()
        angles = (2 * math.pi * coords[:, :, None] / self.periods[None, None, :]).flatten(1, 2).tile(2)
        return angles.sin(), angles.cos()


def _rotate(x: Tensor, sin: Tensor, cos: Tensor) -> Tensor:
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), -1) * sin


class MaskedBiasLinear(nn.Linear):
    """The qkv projection with its bias multiplied by a persistent ``bias_mask``: DINOv3 keeps the
    keys unbiased (1 for q and v, 0 for k; upstream builds the mask as NaN and relies on loading a
    DINOv3 checkpoint to set it, which made a scratch build output NaN: here it starts as DINOv3's)."""

    bias_mask: Tensor

    def __init__(self, dim: int) -> None:
        super().__init__(dim, 3 * dim)
        mask = torch.ones(3 * dim)
        mask[dim:2 * dim] = 0.0
        self.register_buffer("bias_mask", mask)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias * self.bias_mask.to(self.bias.dtype))


class ViTAttention(nn.Module):
    """Multi-head self-attention; the rotary embedding turns the patch tokens (after ``prefix``
    class/storage tokens). ``mask_k_bias``: DINOv3's unbiased keys (:class:`MaskedBiasLinear`)."""

    def __init__(self, dim: int, heads: int, *, mask_k_bias: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = MaskedBiasLinear(dim) if mask_k_bias else nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], prefix: int) -> Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        sin, cos = rope
        q = torch.cat((q[:, :, :prefix], _rotate(q[:, :, prefix:].float(), sin, cos).to(q.dtype)), 2)
        k = torch.cat((k[:, :, :prefix], _rotate(k[:, :, prefix:].float(), sin, cos).to(k.dtype)), 2)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    """``fc2(gelu(fc1(x)))``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class SwiGLU(nn.Module):
    """``w3(silu(w1 x) * w2 x)`` with DINOv3's hidden width (2/3 of ``hidden``, rounded up to 8)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        width = int(hidden * 2 / 3)
        width += -width % 8
        self.w1 = nn.Linear(dim, width)
        self.w2 = nn.Linear(dim, width)
        self.w3 = nn.Linear(width, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.w3(F.silu(self.w1(x)) * self.w2(x))


class LayerScale(nn.Module):
    """Per-channel residual scale ``gamma`` (DINOv3 starts it at 1e-5)."""

    def __init__(self, dim: int, init: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), init))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class ViTBlock(nn.Module):
    """Pre-norm block: ``x + ls1(attn(norm1 x))``, then ``x + ls2(mlp(norm2 x))``."""

    def __init__(self, dim: int, heads: int, hidden: int, *, eps: float, swiglu: bool = False,
                 layer_scale: bool = False, mask_k_bias: bool = False) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = ViTAttention(dim, heads, mask_k_bias=mask_k_bias)
        self.ls1: nn.Module = LayerScale(dim) if layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp: nn.Module = SwiGLU(dim, hidden) if swiglu else Mlp(dim, hidden)
        self.ls2: nn.Module = LayerScale(dim) if layer_scale else nn.Identity()

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], prefix: int) -> Tensor:
        x = x + self.ls1(self.attn(self.norm1(x), rope, prefix))
        return x + self.ls2(self.mlp(self.norm2(x)))


class PatchEmbed(nn.Module):
    """16x16 patches -> tokens ``[B, h * w, dim]`` (key ``proj``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, PATCH, PATCH)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


def _init_vit(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)


class _TinyModel(nn.Module):
    """The key level ``_model`` of upstream's ViT-Tiny wrapper."""

    def __init__(self, dim: int, heads: int, depth: int) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.patch_embed = PatchEmbed(dim)
        self.blocks = nn.ModuleList(ViTBlock(dim, heads, 4 * dim, eps=1e-6) for _ in range(depth))
        self.rope_embed = RopeEmbedding(dim // heads)


class TinyViT(nn.Module):
    """DEIMv2 s/m's ViT-Tiny(+): 12 blocks, a class token, outputs of blocks ``returned``."""

    def __init__(self, dim: int, heads: int, returned: tuple[int, ...], depth: int = 12) -> None:
        super().__init__()
        self.embed_dim, self.returned = dim, returned
        self._model = _TinyModel(dim, heads, depth)
        nn.init.trunc_normal_(self._model.cls_token, std=0.02)
        _init_vit(self)

    def forward(self, x: Tensor) -> list[Tensor]:
        """Patch tokens ``[B, h * w, dim]`` after each returned block (no final norm)."""
        m = self._model
        tokens = m.patch_embed(x)
        tokens = torch.cat((m.cls_token.expand(x.shape[0], -1, -1), tokens), 1)
        rope = m.rope_embed(x.shape[2] // PATCH, x.shape[3] // PATCH)
        outs = []
        for i, block in enumerate(m.blocks):
            tokens = block(tokens, rope, 1)
            if i in self.returned:
                outs.append(tokens[:, 1:])
        return outs


@dataclass(frozen=True)
class DINOv3Size:
    dim: int = 384
    heads: int = 6
    ffn_ratio: int = 4
    swiglu: bool = False
    storage: int = 4
    depth: int = 12


DINOV3_SIZES = {"vits16": DINOv3Size(), "vits16plus": DINOv3Size(ffn_ratio=6, swiglu=True)}


class DINOv3ViT(nn.Module):
    """DINOv3 ViT-S (``vits16``) or ViT-S+ (``vits16plus``): outputs of blocks ``returned``,
    through the final norm, patch tokens only."""

    def __init__(self, arch: str, returned: tuple[int, ...]) -> None:
        super().__init__()
        v = DINOV3_SIZES[arch]
        self.embed_dim, self.returned, self.prefix = v.dim, returned, 1 + v.storage
        self.cls_token = nn.Parameter(torch.zeros(1, 1, v.dim))
        self.storage_tokens = nn.Parameter(torch.zeros(1, v.storage, v.dim))
        self.mask_token = nn.Parameter(torch.zeros(1, v.dim))  # masked pre-training only; kept for the layout
        self.patch_embed = PatchEmbed(v.dim)
        self.rope_embed = RopeEmbedding(v.dim // v.heads, rescale=2.0)
        self.blocks = nn.ModuleList(ViTBlock(v.dim, v.heads, v.ffn_ratio * v.dim, eps=1e-5, swiglu=v.swiglu,
                                             layer_scale=True, mask_k_bias=True) for _ in range(v.depth))
        self.norm = nn.LayerNorm(v.dim, eps=1e-5)
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.storage_tokens, std=0.02)
        _init_vit(self)

    def forward(self, x: Tensor) -> list[Tensor]:
        b = x.shape[0]
        # ``0 * mask_token`` keeps it in the graph, as upstream's unmasked path does.
        cls = self.cls_token + 0 * self.mask_token
        tokens = torch.cat((cls.expand(b, -1, -1), self.storage_tokens.expand(b, -1, -1), self.patch_embed(x)), 1)
        rope = self.rope_embed(x.shape[2] // PATCH, x.shape[3] // PATCH)
        outs = []
        for i, block in enumerate(self.blocks):
            tokens = block(tokens, rope, self.prefix)
            if i in self.returned:
                outs.append(self.norm(tokens)[:, self.prefix:])
        return outs


class SpatialPrior(nn.Module):
    """A light CNN beside the ViT for spatial detail at strides 8, 16, 32 (``inplanes``, twice and
    four times as wide). Upstream uses SyncBatchNorm: plain BatchNorm in one process, same keys."""

    def __init__(self, inplanes: int) -> None:
        super().__init__()
        c = inplanes
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.GELU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.conv2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(2 * c))
        self.conv3 = nn.Sequential(nn.GELU(), nn.Conv2d(2 * c, 4 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(4 * c))
        self.conv4 = nn.Sequential(nn.GELU(), nn.Conv2d(4 * c, 4 * c, 3, 2, 1, bias=False), nn.BatchNorm2d(4 * c))

    def forward(self, x: Tensor) -> list[Tensor]:
        c2 = self.conv2(self.stem(x))
        c3 = self.conv3(c2)
        return [c2, c3, self.conv4(c3)]


class ViTAdapter(nn.Module):
    """ViT tokens (stride 16) resized to strides 8, 16, 32, each concatenated with the spatial
    prior's map of that stride, projected to ``hidden`` channels and normalised (upstream's
    ``DINOv3STAs``; keys ``dinov3``, ``sta``, ``convs``, ``norms``).

    Args:
        vit: ``"tiny"`` (``dim``/``heads`` given) or a DINOv3 arch (``"vits16"``, ``"vits16plus"``).
        returned: the ViT blocks whose outputs feed the three levels (finest first).
        inplanes: the spatial prior's width; hidden: output channels (default: the ViT width).
    """

    def __init__(self, vit: str, returned: tuple[int, ...], *, dim: int = 192, heads: int = 3, inplanes: int = 16,
                 hidden: int | None = None) -> None:
        super().__init__()
        self.dinov3: nn.Module = TinyViT(dim, heads, returned) if vit == "tiny" else DINOv3ViT(vit, returned)
        width = int(self.dinov3.embed_dim)
        hidden = hidden or width
        self.sta = SpatialPrior(inplanes)
        self.convs = nn.ModuleList(nn.Conv2d(width + inplanes * k, hidden, 1, bias=False) for k in (2, 4, 4))
        self.norms = nn.ModuleList(nn.BatchNorm2d(hidden) for _ in range(3))
        self.out_channels = [hidden] * 3
        self.out_strides = [8, 16, 32]

    def forward(self, x: Tensor) -> list[Tensor]:
        b, _, h, w = x.shape
        gh, gw = h // PATCH, w // PATCH
        outs = []
        for i, (tokens, detail) in enumerate(zip(self.dinov3(x), self.sta(x))):
            grid = tokens.transpose(1, 2).reshape(b, -1, gh, gw)
            scale = 2.0 ** (1 - i)   # strides 8, 16, 32 from the stride-16 tokens
            grid = F.interpolate(grid, size=[int(gh * scale), int(gw * scale)], mode="bilinear", align_corners=False)
            outs.append(self.norms[i](self.convs[i](torch.cat((grid, detail), 1))))
        return outs
