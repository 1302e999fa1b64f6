"""AIFI: the hybrid encoders' attention within one feature level (the coarsest, most semantic),
a post-norm transformer encoder layer with a fixed sine-cosine position embedding.

Module names (``encoder.<i>.layers.<j>.self_attn``, ``linear1``, ``linear2``, ``norm1``,
``norm2``) are upstream's checkpoint keys; RT-DETR, the D-FINE encoders and EC share the layout.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from .determinism import needs_deterministic_backward
from .position import sincos_position_embedding


class EncoderLayer(nn.Module):
    """Post-norm transformer encoder layer (self-attention with position embedding, feed-forward
    with ``activation``: GELU in RT-DETR and D-FINE, SiLU in EC)."""

    def __init__(self, dim: int, heads: int, ffn: int, activation: Callable[[Tensor], Tensor] = F.gelu) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.activation = activation

    def forward(self, src: Tensor, pos: Tensor) -> Tensor:
        q = k = src + pos
        # need_weights=True takes plain matmul + softmax (deterministic backward); else fused SDPA.
        src = self.norm1(src + self.self_attn(q, k, src, need_weights=needs_deterministic_backward(src))[0])
        return self.norm2(src + self.linear2(self.activation(self.linear1(src))))


class TransformerEncoder(nn.Module):
    """A stack of encoder layers (one in every upstream size)."""

    def __init__(self, dim: int, heads: int, ffn: int, depth: int = 1,
                 activation: Callable[[Tensor], Tensor] = F.gelu) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(dim, heads, ffn, activation) for _ in range(depth))

    def forward(self, src: Tensor, pos: Tensor) -> Tensor:
        for layer in self.layers:
            src = layer(src, pos)
        return src


def attend_level(encoder: nn.Module, feat: Tensor) -> Tensor:
    """AIFI over the tokens of one ``[B, C, H, W]`` map, with the fixed position embedding."""
    b, c, h, w = feat.shape
    tokens = feat.flatten(2).permute(0, 2, 1)
    pos = sincos_position_embedding(w, h, c, device=feat.device).to(tokens.dtype)
    memory = encoder(tokens, pos)
    return memory.permute(0, 2, 1).reshape(b, c, h, w).contiguous()
