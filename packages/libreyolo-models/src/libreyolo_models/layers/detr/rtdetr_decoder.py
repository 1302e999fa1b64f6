"""RT-DETR's decoder (and RT-DETRv2's): query selection from the encoder, then deformable decoder
layers that refine a box per query layer by layer, each layer with its own score and box head.

The queries are not learned embeddings: the encoder scores every token of every level, the top
``num_queries`` become the queries (their features as content, their predicted boxes as
references). Module names are upstream's checkpoint keys (``input_proj``, ``decoder.layers``,
``denoising_class_embed``, ``query_pos_head``, ``enc_output``, ``enc_score_head``,
``enc_bbox_head``, ``dec_score_head``, ``dec_bbox_head``). RT-DETRv2's layout differs only in
names and buffers (``enc_output.proj``/``.norm``, persistent ``anchors``/``valid_mask`` and
``num_points_scale``): constructor options, the same computation.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .anchors import AnchorBuffers, encoder_anchors, inverse_sigmoid, level_shapes
from .deformable import MSDeformableAttention
from .determinism import needs_deterministic_backward
from .mlp import MLP
from .norms import NORM_EPS
from .queries import gather_tokens, topk_tokens

if TYPE_CHECKING:
    from .denoising import DenoisingQueries

FP16_MAX = 65504.0


class DecoderLayer(nn.Module):
    """Self-attention among queries, deformable cross-attention into the memory, ReLU FFN;
    post-norm after each (the last norm's input clamped to fp16's range, as upstream)."""

    def __init__(self, dim: int, heads: int, ffn: int, levels: int, points: int, scale_buffer: bool = False) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = MSDeformableAttention(dim, heads, levels, points, scale_buffer=scale_buffer)
        self.norm2 = nn.LayerNorm(dim)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm3 = nn.LayerNorm(dim)

    def forward(self, tgt: Tensor, reference: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None, query_pos: Tensor) -> Tensor:
        q = k = tgt + query_pos
        exact = needs_deterministic_backward(tgt)  # plain matmul + softmax; else fused SDPA
        tgt = self.norm1(tgt + self.self_attn(q, k, tgt, attn_mask=attn_mask, need_weights=exact)[0])
        tgt = self.norm2(tgt + self.cross_attn(tgt + query_pos, reference, memory, shapes))
        tgt = tgt + self.linear2(F.relu(self.linear1(tgt)))
        return self.norm3(tgt.clamp(min=-FP16_MAX, max=FP16_MAX))


class DecoderStack(nn.Module):
    """Holds the decoder layers (key ``decoder.decoder.layers``); the refinement loop that needs
    the per-layer heads lives in :class:`RTDETRDecoder`."""

    def __init__(self, dim: int, heads: int, ffn: int, depth: int, levels: int, points: int,
                 scale_buffer: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, ffn, levels, points, scale_buffer) for _ in range(depth))


class RTDETRDecoder(AnchorBuffers):
    """Encoder maps -> per-query class logits and boxes (upstream's ``RTDETRTransformer``).

    Args:
        nc: classes. feat_channels: width of each encoder map. dim, ffn, heads: decoder widths.
        depth: decoder layers. points: sampling points per head and level.
        eval_idx: the layer inference reads (negative counts from the end).
        num_queries: queries selected from the encoder (``num_queries`` may be changed later:
            the count does not change the weights).
        v2_layout: RT-DETRv2's keys: ``enc_output.proj``/``.norm`` and persistent
            ``num_points_scale`` buffers, plus ``anchors``/``valid_mask`` buffers built for
            ``imgsz`` (H, W) at ``strides``.
    """

    def __init__(self, nc: int, feat_channels: list[int], *, dim: int, ffn: int, heads: int, depth: int,
                 points: int, eval_idx: int, num_queries: int, v2_layout: bool = False,
                 imgsz: tuple[int, int] = (640, 640), strides: tuple[int, ...] = (8, 16, 32)) -> None:
        super().__init__()
        self.nc, self.num_queries, self.depth = nc, num_queries, depth
        self.logged: set[tuple[int, int]] = set()   # (queries, tokens) already logged as too few tokens
        self.eval_idx = eval_idx % depth
        self.v2_layout, self.strides = v2_layout, tuple(strides)
        levels = len(feat_channels)
        if v2_layout:
            self.register_anchor_buffers(level_shapes(imgsz, strides))
        self.input_proj = nn.ModuleList(nn.Sequential(OrderedDict([
            ("conv", nn.Conv2d(c, dim, 1, bias=False)), ("norm", nn.BatchNorm2d(dim, eps=NORM_EPS))]))
            for c in feat_channels)
        self.decoder = DecoderStack(dim, heads, ffn, depth, levels, points, scale_buffer=v2_layout)
        # Row ``nc`` is the padding label of denoising slots without a box.
        self.denoising_class_embed = nn.Embedding(nc + 1, dim, padding_idx=nc)
        self.query_pos_head = MLP(4, 2 * dim, dim, 2)
        self.enc_output = (nn.Sequential(OrderedDict([("proj", nn.Linear(dim, dim)), ("norm", nn.LayerNorm(dim))]))
                           if v2_layout else nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim)))
        self.enc_score_head = nn.Linear(dim, nc)
        self.enc_bbox_head = MLP(dim, dim, 4, 3)
        self.dec_score_head = nn.ModuleList(nn.Linear(dim, nc) for _ in range(depth))
        self.dec_bbox_head = nn.ModuleList(MLP(dim, dim, 4, 3) for _ in range(depth))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Scores start at a 1 % prior (focal-loss practice), box heads at zero (queries start on
        their anchors / references), the projections Xavier."""
        prior = -math.log((1 - 0.01) / 0.01)
        for head in (self.enc_score_head, *self.dec_score_head):
            nn.init.constant_(head.bias, prior)
        for mlp in (self.enc_bbox_head, *self.dec_bbox_head):
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        nn.init.xavier_uniform_(self.enc_output[0].weight)  # type: ignore[arg-type]  # an nn.Linear's
        for layer in self.query_pos_head.layers:
            nn.init.xavier_uniform_(layer.weight)  # type: ignore[arg-type]

    # ----------------------------------------------------------------- stages
    def flatten_memory(self, feats: list[Tensor]) -> tuple[Tensor, list[tuple[int, int]]]:
        """Project each map and concatenate the tokens: ``[B, sum(h*w), dim]`` and the shapes."""
        tokens, shapes = [], []
        for proj, feat in zip(self.input_proj, feats):
            x = proj(feat)
            shapes.append((int(x.shape[2]), int(x.shape[3])))
            tokens.append(x.flatten(2).permute(0, 2, 1))
        return torch.cat(tokens, 1), shapes

    def select_queries(self, memory: Tensor, shapes: list[tuple[int, int]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The encoder's top-k tokens as queries.

        Returns ``(content [B, Q, dim], reference logits [B, Q, 4], encoder logits [B, Q, nc],
        encoder boxes [B, Q, 4])``; content and references are detached (the decoder refines
        them; the encoder learns from its own supervised top-k outputs).
        """
        if self.v2_layout:
            anchors, valid = self.anchors_for(shapes, memory.device)
        else:
            anchors, valid = encoder_anchors(shapes, device=memory.device)
        memory = valid.to(memory.dtype) * memory
        content = self.enc_output(memory)
        logits = self.enc_score_head(content)
        coords = self.enc_bbox_head(content) + anchors.to(memory.dtype)
        top = topk_tokens(logits, self.num_queries, shapes, self.strides, clamp=self.v2_layout,
                          logged=self.logged)
        reference = gather_tokens(coords, top)
        return gather_tokens(content, top).detach(), reference.detach(), gather_tokens(logits, top), reference.sigmoid()

    # ----------------------------------------------------------------- passes
    def forward(self, feats: list[Tensor]) -> dict[str, Tensor]:
        """Inference: ``pred_logits [B, Q, nc]`` (raw) and ``pred_boxes [B, Q, 4]`` (cx, cy, w, h in
        [0, 1]) of layer ``eval_idx``; later layers are not run. The same in train and eval mode."""
        memory, shapes = self.flatten_memory(feats)
        queries, reference, _, _ = self.select_queries(memory, shapes)
        logits, boxes = self._refine(queries, reference, memory, shapes, None, last=self.eval_idx, every_layer=False)
        return {"pred_logits": logits[-1], "pred_boxes": boxes[-1]}

    def forward_train(self, feats: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """Training: every layer's outputs, the encoder's top-k outputs and the denoising outputs.

        Returns ``logits [L, B, Q, nc]``, ``boxes [L, B, Q, 4]``, ``enc_logits [B, Q, nc]``,
        ``enc_boxes [B, Q, 4]``, ``dn_logits [L, B, D, nc]`` and ``dn_boxes [L, B, D, 4]``
        (``D`` denoising queries, 0 when the batch has no box).
        """
        memory, shapes = self.flatten_memory(feats)
        queries, reference, enc_logits, enc_boxes = self.select_queries(memory, shapes)
        # Embedded even when D == 0, so the embedding always takes part in the backward (DDP
        # without find_unused_parameters needs every parameter in every step's graph).
        dn_content = self.denoising_class_embed(denoising.labels).to(queries.dtype)
        queries = torch.cat((dn_content, queries), 1)
        reference = torch.cat((denoising.boxes_unact.to(reference.dtype), reference), 1)
        mask = denoising.attn_mask
        if mask is not None:  # built for num_queries; a small input may have selected fewer (v2 layout)
            mask = mask[:queries.shape[1], :queries.shape[1]]
        logits, boxes = self._refine(queries, reference, memory, shapes, mask, last=self.depth - 1, every_layer=True)
        d = denoising.num_queries
        return {"logits": logits[:, :, d:], "boxes": boxes[:, :, d:], "enc_logits": enc_logits, "enc_boxes": enc_boxes,
                "dn_logits": logits[:, :, :d], "dn_boxes": boxes[:, :, :d]}

    def _refine(self, queries: Tensor, reference_logits: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
                attn_mask: Tensor | None, *, last: int, every_layer: bool) -> tuple[Tensor, Tensor]:
        """Run layers ``0..last``: stacked ``(logits, boxes)`` of every layer, or of ``last`` only.

        Layer ``i`` predicts a box delta in logit space on top of the previous layer's box. Each
        layer's input reference is detached; with ``every_layer`` (training) the box a layer reports
        keeps the gradient into the previous layer's box head (each layer's box loss reaches the
        heads before it): upstream's iterative refinement. Both give the same numbers.
        """
        output = queries
        reference = reference_logits.sigmoid().to(output.dtype)  # detached input of layer 0
        previous = reference                                     # with gradient, for reporting
        all_logits, all_boxes = [], []
        for i in range(last + 1):
            pos = self.query_pos_head(reference)
            output = self.decoder.layers[i](output, reference[:, :, None], memory, shapes, attn_mask, pos)
            delta = self.dec_bbox_head[i](output)
            box = (delta + inverse_sigmoid(reference)).sigmoid()
            if every_layer or i == last:
                all_logits.append(self.dec_score_head[i](output))
                chained = every_layer and i > 0
                all_boxes.append((delta + inverse_sigmoid(previous)).sigmoid() if chained else box)
            previous, reference = box, box.detach()
        return torch.stack(all_logits), torch.stack(all_boxes)
