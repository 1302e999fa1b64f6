"""RF-DETR's transformer (upstream's ``transformer.``): two-stage query selection and the LW-DETR
decoder.

Two-stage: every memory token proposes a box (a fixed-size square around its cell, refined by a
small head) and a class score; the best-scoring tokens' boxes become the decoder's reference
boxes. Each query group of Group DETR has its own proposal heads, so each group picks its own
tokens. The decoder queries themselves are learned embeddings (``query_feat``), not the selected
tokens. Reference boxes are fixed through the decoder ("lite" refinement): every layer predicts
its box as a delta on the same reference, in cx, cy, w, h space (``bbox_reparam``: centre shifts
scale with the reference's size, sizes by ``exp``).

Module names (``decoder.layers.N.*``, ``enc_output.G``, ``enc_out_class_embed.G`` ...) are
upstream's checkpoint keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .deformable import DeformableAttention


class MLP(nn.Module):
    """Linear layers with ReLU between them (``layers.N`` keys)."""

    def __init__(self, c_in: int, hidden: int, c_out: int, depth: int) -> None:
        super().__init__()
        dims = [c_in] + [hidden] * (depth - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:] + [c_out]))

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


def box_sine_embedding(boxes: Tensor, dim: int = 128, temperature: float = 10000.0) -> Tensor:
    """``[B, Q, 4]`` cx, cy, w, h in [0, 1] -> ``[B, Q, 4 * dim]`` sine embeddings, ordered
    (y, x, w, h) as upstream orders them; each coordinate is scaled by 2 pi first."""
    steps = torch.arange(dim, dtype=boxes.dtype, device=boxes.device)
    freqs = temperature ** (2 * torch.div(steps, 2, rounding_mode="floor") / dim)
    parts = []
    for k in (1, 0, 2, 3):
        angle = boxes[:, :, k, None] * (2 * math.pi) / freqs
        parts.append(torch.stack((angle[:, :, 0::2].sin(), angle[:, :, 1::2].cos()), dim=3).flatten(2))
    return torch.cat(parts, 2)


def reparam_boxes(delta: Tensor, reference: Tensor) -> Tensor:
    """Apply ``delta`` (dx, dy, dw, dh) to cx, cy, w, h ``reference`` boxes: centres move by
    ``delta * size``, sizes scale by ``exp(delta)``."""
    return torch.cat((delta[..., :2] * reference[..., 2:] + reference[..., :2],
                      delta[..., 2:].exp() * reference[..., 2:]), -1)


class DecoderLayer(nn.Module):
    """Self-attention among queries (within each group), deformable cross-attention to the memory,
    feed-forward; post-norm. Query positions (from the reference boxes) are added to q and k."""

    def __init__(self, dim: int, self_heads: int, cross_heads: int, points: int, ffn: int, levels: int = 1) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, self_heads, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = DeformableAttention(dim, cross_heads, levels, points)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.norm3 = nn.LayerNorm(dim)

    def forward(self, tgt: Tensor, query_pos: Tensor, reference: Tensor, memory: Tensor,
                shapes: list[tuple[int, int]], groups: int) -> Tensor:
        b, q, c = tgt.shape
        qk = tgt + query_pos
        if groups > 1:  # each group attends only to itself: groups become batch entries
            def split(x: Tensor) -> Tensor:
                return x.view(b, groups, q // groups, c).transpose(0, 1).reshape(groups * b, q // groups, c)
            out = self.self_attn(split(qk), split(qk), split(tgt), need_weights=False)[0]
            out = out.view(groups, b, q // groups, c).transpose(0, 1).reshape(b, q, c)
        else:
            out = self.self_attn(qk, qk, tgt, need_weights=False)[0]
        tgt = self.norm1(tgt + out)
        tgt = self.norm2(tgt + self.cross_attn(tgt + query_pos, reference, memory, shapes))
        return self.norm3(tgt + self.linear2(F.relu(self.linear1(tgt))))


class Decoder(nn.Module):
    """The decoder layers, a final norm, and the head turning reference boxes into query positions."""

    def __init__(self, dim: int, depth: int, self_heads: int, cross_heads: int, points: int, ffn: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(dim, self_heads, cross_heads, points, ffn) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.ref_point_head = MLP(2 * dim, dim, dim, 2)
        self.dim = dim

    def forward(self, tgt: Tensor, reference: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                groups: int) -> Tensor:
        """``tgt [B, N, dim]`` queries with ``reference [B, N, 4]`` boxes -> ``[layers, B, N, dim]``
        (each layer's normed output)."""
        query_pos = self.ref_point_head(box_sine_embedding(reference, self.dim // 2))
        ref = reference[:, :, None]          # one memory level
        outputs = []
        for layer in self.layers:
            tgt = layer(tgt, query_pos, ref, memory, shapes, groups)
            outputs.append(self.norm(tgt))
        return torch.stack(outputs)


def token_proposals(memory: Tensor, shapes: list[tuple[int, int]]) -> tuple[Tensor, Tensor]:
    """A box per memory token: centred on its cell, ``0.05 * 2**level`` wide and tall.

    Returns ``(memory, proposals [1, N, 4])`` with both zeroed where a proposal reaches within 0.01
    of the image border (those tokens cannot win the selection with a meaningful box).
    """
    proposals = []
    for level, (h, w) in enumerate(shapes):
        ys = torch.arange(h, dtype=torch.float32, device=memory.device)
        xs = torch.arange(w, dtype=torch.float32, device=memory.device)
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        centre = torch.stack(((gx + 0.5) / w, (gy + 0.5) / h), -1)
        size = torch.full_like(centre, 0.05 * 2.0**level)
        proposals.append(torch.cat((centre, size), -1).reshape(1, h * w, 4))
    boxes = torch.cat(proposals, 1)
    valid = ((boxes > 0.01) & (boxes < 0.99)).all(-1, keepdim=True)
    return memory.masked_fill(~valid, 0.0), boxes.masked_fill(~valid, 0.0).to(memory.dtype)


class Transformer(nn.Module):
    """Two-stage selection heads (one set per query group) and the decoder."""

    def __init__(self, nc_out: int, dim: int, depth: int, self_heads: int, cross_heads: int, points: int,
                 ffn: int, groups: int) -> None:
        super().__init__()
        self.decoder = Decoder(dim, depth, self_heads, cross_heads, points, ffn)
        self.enc_output = nn.ModuleList(nn.Linear(dim, dim) for _ in range(groups))
        self.enc_output_norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(groups))
        self.enc_out_bbox_embed = nn.ModuleList(MLP(dim, dim, 4, 3) for _ in range(groups))
        self.enc_out_class_embed = nn.ModuleList(nn.Linear(dim, nc_out) for _ in range(groups))

    def select(self, memory: Tensor, shapes: list[tuple[int, int]], queries: int, groups: int
               ) -> tuple[Tensor, Tensor, Tensor]:
        """Each group's best ``min(queries, tokens)`` tokens.

        Returns:
            ``(features [B, G*k, dim], boxes [B, G*k, 4], logits [B, G*k, nc_out])``: the selected
            tokens' projected features, proposal boxes (cx, cy, w, h, not detached) and class
            logits, groups one after another, each in descending score order.
        """
        masked, proposals = token_proposals(memory, shapes)
        k = min(queries, memory.shape[1])
        feats, boxes, logits = [], [], []
        for g in range(groups):
            projected = self.enc_output_norm[g](self.enc_output[g](masked))
            scores = self.enc_out_class_embed[g](projected).max(-1).values
            coords = reparam_boxes(self.enc_out_bbox_embed[g](projected), proposals)
            top = scores.topk(k, dim=1).indices
            boxes.append(coords.gather(1, top[..., None].expand(-1, -1, 4)))
            chosen = projected.gather(1, top[..., None].expand(-1, -1, projected.shape[-1]))
            feats.append(chosen)
            logits.append(self.enc_out_class_embed[g](chosen))
        return torch.cat(feats, 1), torch.cat(boxes, 1), torch.cat(logits, 1)
