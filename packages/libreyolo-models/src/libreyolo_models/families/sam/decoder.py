"""SAM's mask decoder (``mask_decoder.*``): a two-way transformer between the prompt tokens (an
IoU token, four mask tokens, the prompts) and the image embedding, then hypernetwork MLPs that
turn each mask token into a mask over the 4x upscaled embedding, and an MLP predicting each
mask's IoU.

Layout facts from the official ``mask_decoder.py`` / ``transformer.py``: width 256, 2 two-way
layers of 8 heads with MLP 2048 (ReLU), cross attention projected down to 128
(``attention_downsample_rate=2``), ``final_attn_token_to_image`` + ``norm_final_attn``; four mask
tokens (one single-mask output, three multimask outputs), ``output_upscaling`` two transposed
convolutions (256 -> 64 -> 32), ``output_hypernetworks_mlps.{0..3}`` 3-layer MLPs 256 -> 32,
``iou_prediction_head`` 3 layers 256 -> 4.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .encoder import EMBED, LayerNorm2d, MLPBlock

MASK_TOKENS = 4  # token 0: the single-mask output; tokens 1-3: the multimask outputs


class MLP(nn.Module):
    """``layers.{i}`` linear layers with ReLU between them."""

    def __init__(self, dim_in: int, hidden: int, dim_out: int, depth: int) -> None:
        super().__init__()
        dims = [dim_in] + [hidden] * (depth - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:] + [dim_out]))

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


class TokenAttention(nn.Module):
    """Attention whose projections may narrow the width (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``)."""

    def __init__(self, dim: int, heads: int, downsample: int = 1) -> None:
        super().__init__()
        inner = dim // downsample
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.out_proj = nn.Linear(inner, dim)

    def _split(self, x: Tensor) -> Tensor:
        b, n, c = x.shape
        return x.reshape(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        q, k, v = self._split(self.q_proj(q)), self._split(self.k_proj(k)), self._split(self.v_proj(v))
        attn = (q @ k.permute(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
        out = torch.softmax(attn, dim=-1) @ v
        b, _, n, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, n, -1))


class TwoWayAttentionBlock(nn.Module):
    """Tokens attend to themselves, tokens to the image, an MLP on tokens, the image to tokens."""

    def __init__(self, dim: int, heads: int, mlp: int, skip_first_pe: bool) -> None:
        super().__init__()
        self.self_attn = TokenAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn_token_to_image = TokenAttention(dim, heads, 2)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLPBlock(dim, mlp, nn.ReLU)
        self.norm3 = nn.LayerNorm(dim)
        self.norm4 = nn.LayerNorm(dim)
        self.cross_attn_image_to_token = TokenAttention(dim, heads, 2)
        self.skip_first_pe = skip_first_pe

    def forward(self, queries: Tensor, keys: Tensor, query_pe: Tensor, key_pe: Tensor) -> tuple[Tensor, Tensor]:
        if self.skip_first_pe:
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.norm1(queries)
        q, k = queries + query_pe, keys + key_pe
        queries = self.norm2(queries + self.cross_attn_token_to_image(q, k, keys))
        queries = self.norm3(queries + self.mlp(queries))
        q, k = queries + query_pe, keys + key_pe
        keys = self.norm4(keys + self.cross_attn_image_to_token(k, q, queries))
        return queries, keys


class TwoWayTransformer(nn.Module):
    def __init__(self, dim: int = EMBED, depth: int = 2, heads: int = 8, mlp: int = 2048) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TwoWayAttentionBlock(dim, heads, mlp, i == 0) for i in range(depth))
        self.final_attn_token_to_image = TokenAttention(dim, heads, 2)
        self.norm_final_attn = nn.LayerNorm(dim)

    def forward(self, image: Tensor, image_pe: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        keys = image.flatten(2).permute(0, 2, 1)
        key_pe = image_pe.flatten(2).permute(0, 2, 1)
        queries = tokens
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, key_pe)
        queries = queries + self.final_attn_token_to_image(queries + tokens, keys + key_pe, keys)
        return self.norm_final_attn(queries), keys


class MaskDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.transformer = TwoWayTransformer()
        self.iou_token = nn.Embedding(1, EMBED)
        self.mask_tokens = nn.Embedding(MASK_TOKENS, EMBED)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(EMBED, EMBED // 4, kernel_size=2, stride=2), LayerNorm2d(EMBED // 4), nn.GELU(),
            nn.ConvTranspose2d(EMBED // 4, EMBED // 8, kernel_size=2, stride=2), nn.GELU())
        self.output_hypernetworks_mlps = nn.ModuleList(MLP(EMBED, EMBED, EMBED // 8, 3) for _ in range(MASK_TOKENS))
        self.iou_prediction_head = MLP(EMBED, 256, MASK_TOKENS, 3)

    def forward(self, embedding: Tensor, image_pe: Tensor, sparse: Tensor, dense: Tensor,
                multimask: bool) -> tuple[Tensor, Tensor]:
        """One image's ``[1, 256, h, w]`` embedding and ``P`` prompts -> mask logits ``[P, C, 4h, 4w]``
        and predicted IoUs ``[P, C]``; ``C`` is 3 with ``multimask``, else 1 (the single-mask token)."""
        out_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0)
        tokens = torch.cat([out_tokens[None].expand(sparse.shape[0], -1, -1), sparse], dim=1)
        src = torch.repeat_interleave(embedding, tokens.shape[0], dim=0) + dense
        pos = torch.repeat_interleave(image_pe, tokens.shape[0], dim=0)
        b, c, h, w = src.shape
        hs, src = self.transformer(src, pos, tokens)
        mask_out = hs[:, 1:1 + MASK_TOKENS, :]
        upscaled = self.output_upscaling(src.transpose(1, 2).reshape(b, c, h, w))
        hyper = torch.stack([mlp(mask_out[:, i, :]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=1)
        b, c, h, w = upscaled.shape
        masks = (hyper @ upscaled.view(b, c, h * w)).view(b, -1, h, w)
        iou = self.iou_prediction_head(hs[:, 0, :])
        keep = slice(1, None) if multimask else slice(0, 1)
        return masks[:, keep], iou[:, keep]
