"""SAM's prompt encoder (``prompt_encoder.*``): points and box corners become sparse tokens
(random-Fourier positions plus a learned embedding per kind), the absence of a mask input one
dense learned embedding.

Layout facts from the official ``prompt_encoder.py``: ``pe_layer.positional_encoding_gaussian_matrix
[2, 128]`` (a persistent buffer), ``point_embeddings.{0..3}.weight [1, 256]`` (negative point,
positive point, box top-left, box bottom-right), ``not_a_point_embed``, ``no_mask_embed`` and the
``mask_downscaling`` convolutions (a mask prompt: a previous call's low-resolution logits).
Coordinates are in the encoder's input pixels (after the resize, before the pad) and are shifted
by half a pixel to the pixel's centre before encoding, as upstream does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .encoder import EMBED, LayerNorm2d

MASK_CHANNELS = 16


class PositionEmbeddingRandom(nn.Module):
    """Fourier features of ``(x, y)`` in [0, 1] through a fixed Gaussian matrix."""

    positional_encoding_gaussian_matrix: Tensor

    def __init__(self, features: int) -> None:
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", torch.randn((2, features)))

    def encode(self, coords: Tensor) -> Tensor:
        """In float32 whatever the weights' dtype (callers cast the result), as upstream's ``.to(torch.float)``."""
        coords = (2 * coords.float() - 1) @ self.positional_encoding_gaussian_matrix.float()
        coords = 2 * math.pi * coords
        return torch.cat([torch.sin(coords), torch.cos(coords)], dim=-1)

    def grid(self, rows: int, cols: int) -> Tensor:
        """``[C, rows, cols]``: the encoding of every embedding cell's centre."""
        device = self.positional_encoding_gaussian_matrix.device
        ones = torch.ones((rows, cols), device=device, dtype=torch.float32)
        y = (ones.cumsum(dim=0) - 0.5) / rows
        x = (ones.cumsum(dim=1) - 0.5) / cols
        return self.encode(torch.stack([x, y], dim=-1)).permute(2, 0, 1)

    def points(self, coords: Tensor, input_hw: tuple[int, int]) -> Tensor:
        """``[B, N, 2]`` pixel ``(x, y)`` over an ``input_hw`` input -> ``[B, N, C]``."""
        scaled = torch.stack([coords[..., 0] / input_hw[1], coords[..., 1] / input_hw[0]], dim=-1)
        return self.encode(scaled)


class PromptEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pe_layer = PositionEmbeddingRandom(EMBED // 2)
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, EMBED) for _ in range(4))
        self.not_a_point_embed = nn.Embedding(1, EMBED)
        self.mask_downscaling = nn.Sequential(
            nn.Conv2d(1, MASK_CHANNELS // 4, kernel_size=2, stride=2), LayerNorm2d(MASK_CHANNELS // 4), nn.GELU(),
            nn.Conv2d(MASK_CHANNELS // 4, MASK_CHANNELS, kernel_size=2, stride=2), LayerNorm2d(MASK_CHANNELS),
            nn.GELU(), nn.Conv2d(MASK_CHANNELS, EMBED, kernel_size=1))
        self.no_mask_embed = nn.Embedding(1, EMBED)

    def kind(self, index: int) -> Tensor:
        """The learned embedding of a prompt kind (0 negative point, 1 positive, 2 / 3 box corners)."""
        embedding = self.point_embeddings[index]
        assert isinstance(embedding, nn.Embedding)
        return embedding.weight

    def dense_positions(self, rows: int, cols: int) -> Tensor:
        """``[1, 256, rows, cols]``: the positions of the image embedding's cells."""
        return self.pe_layer.grid(rows, cols)[None]

    def forward(self, points: tuple[Tensor, Tensor] | None, boxes: Tensor | None, input_hw: tuple[int, int],
                embedding_hw: tuple[int, int], masks: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Prompts in input pixels -> sparse ``[P, N, 256]`` and dense ``[P, 256, h, w]`` embeddings.

        ``points``: coordinates ``[P, N, 2]`` and labels ``[P, N]`` (1 foreground, 0 background,
        -1 padding); ``boxes``: ``[P, 4]`` xyxy; ``masks``: ``[P, 1, 4h, 4w]`` low-resolution mask
        logits (upstream's ``mask_input``), embedded by ``mask_downscaling`` instead of
        ``no_mask_embed``. Without a box a padding point is appended (upstream)."""
        count = (points[0].shape[0] if points is not None else boxes.shape[0] if boxes is not None
                 else masks.shape[0] if masks is not None else 1)
        weight = self.not_a_point_embed.weight
        tokens = [torch.empty((count, 0, EMBED), device=weight.device, dtype=weight.dtype)]
        if points is not None:
            coords, labels = points
            coords = coords + 0.5
            if boxes is None:
                coords = torch.cat([coords, coords.new_zeros((count, 1, 2))], dim=1)
                labels = torch.cat([labels, labels.new_full((count, 1), -1)], dim=1)
            embedded = self.pe_layer.points(coords, input_hw)
            pad = (labels == -1)[..., None]
            embedded = torch.where(pad, weight.to(embedded.dtype), embedded)
            embedded = embedded + (labels == 0)[..., None] * self.kind(0)
            embedded = embedded + (labels == 1)[..., None] * self.kind(1)
            tokens.append(embedded.to(weight.dtype))
        if boxes is not None:
            corners = self.pe_layer.points((boxes + 0.5).reshape(-1, 2, 2), input_hw)
            corners = corners + torch.cat([self.kind(2), self.kind(3)])[None]
            tokens.append(corners.to(weight.dtype))
        if masks is not None:
            dense = self.mask_downscaling(masks.to(weight.dtype))
        else:
            dense = self.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(count, -1, *embedding_hw)
        return torch.cat(tokens, dim=1), dense
