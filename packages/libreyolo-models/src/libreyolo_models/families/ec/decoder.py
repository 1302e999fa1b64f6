"""EC's decoder (D-FINE style, upstream's ``ECTransformer`` under ``decoder.``).

Query selection: every memory token is scored; the best 300 become the queries (their features,
detached, as content; their anchor box refined by a head as reference). Each layer: self-attention,
deformable cross-attention, a learned gate mixing the two, feed-forward. Layer 0 also predicts a
coarse box (``pre_bbox_head``) that becomes every layer's fixed reference; each layer then
predicts four edge distributions (FDR) that add up layer by layer, and its box is the reference
widened by their expected values. A "localization quality" head (LQE) adds to each layer's class
logits a score read from how peaked those distributions are.

Training adds contrastive denoising queries in front of the matching ones and returns every
layer's outputs (see ``forward_train``); inference runs up to the last layer and returns its
logits and boxes. Module names are upstream's checkpoint keys; ``up`` and ``reg_scale`` are
registered on this module and again (the same tensors) on ``decoder``, as upstream's are.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.detr.anchors import SizeBoundBuffers
from ...layers.detr.denoising import DenoisingQueries
from ...layers.query_masks import SegmentationHead
from .attention import DeformableAttention
from .fdr import distance2bbox, integral, weighting_function
from .variants import DECODER_HEADS, DECODER_LAYERS, DECODER_POINTS, NUM_QUERIES, REG_MAX, REG_SCALE, STRIDES


def inverse_sigmoid(x: Tensor, eps: float = 1e-5) -> Tensor:
    x = x.clip(min=0.0, max=1.0)
    return torch.log(x.clip(min=eps) / (1 - x).clip(min=eps))


class MLP(nn.Module):
    """Linear layers with an activation (SiLU in EC, ReLU where named) between them."""

    def __init__(self, c_in: int, hidden: int, c_out: int, depth: int, act: str = "silu") -> None:
        super().__init__()
        dims = [c_in] + [hidden] * (depth - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:] + [c_out]))
        self.act = F.silu if act == "silu" else F.relu

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else self.act(layer(x))
        return x


class Gate(nn.Module):
    """``norm(g1 * x1 + g2 * x2)`` with sigmoid gates read from both inputs."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gate = nn.Linear(2 * dim, 2 * dim)
        self.norm = nn.LayerNorm(dim)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)  # sigmoid(0) = 0.5: an even mix to start

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        g1, g2 = torch.sigmoid(self.gate(torch.cat((x1, x2), -1))).chunk(2, -1)
        return self.norm(g1 * x1 + g2 * x2)


class LQE(nn.Module):
    """Adds to class logits a score from each edge distribution's top-4 probabilities and their mean."""

    def __init__(self, hidden: int = 64, k: int = 4, reg_max: int = REG_MAX) -> None:
        super().__init__()
        self.k, self.reg_max = k, reg_max
        self.reg_conf = MLP(4 * (k + 1), hidden, 1, 2)
        nn.init.zeros_(self.reg_conf.layers[-1].weight)  # type: ignore[arg-type]
        nn.init.zeros_(self.reg_conf.layers[-1].bias)  # type: ignore[arg-type]

    def forward(self, scores: Tensor, corners: Tensor) -> Tensor:
        b, n, _ = corners.shape
        prob = corners.reshape(b, n, 4, self.reg_max + 1).softmax(-1)
        top = prob.topk(self.k, dim=-1).values
        stat = torch.cat((top, top.mean(-1, keepdim=True)), -1)
        return scores + self.reg_conf(stat.reshape(b, n, -1))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, points: list[int]) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = DeformableAttention(dim, heads, points)
        self.gateway = Gate(dim)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, target: Tensor, reference: Tensor, values: list[Tensor], shapes: list[tuple[int, int]],
                attn_mask: Tensor | None, pos: Tensor) -> Tensor:
        q = target + pos
        target = self.norm1(target + self.self_attn(q, q, value=target, attn_mask=attn_mask, need_weights=False)[0])
        target = self.gateway(target, self.cross_attn(target + pos, reference, values, shapes))
        target = target + self.linear2(F.silu(self.linear1(target)))
        return self.norm2(target.clamp(min=-65504, max=65504))


class DecoderStack(nn.Module):
    """The layers and their LQE heads (upstream's ``TransformerDecoder``; ``up`` / ``reg_scale`` are
    attached by the owner), and segment's mask head."""

    def __init__(self, dim: int, heads: int, ffn: int, depth: int, points: list[int], masks: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, ffn, points) for _ in range(depth))
        self.lqe_layers = nn.ModuleList(LQE() for _ in range(depth))
        self.segmentation_head = SegmentationHead(dim, depth) if masks else None


def _image_hw(stride8: Tensor) -> tuple[int, int]:
    """The input's size from the stride-8 map's."""
    return int(stride8.shape[-2]) * STRIDES[0], int(stride8.shape[-1]) * STRIDES[0]


def generate_anchors(shapes: list[tuple[int, int]], eps: float = 1e-2, device: torch.device | None = None
                     ) -> tuple[Tensor, Tensor]:
    """Per token an anchor box ``0.05 * 2**level`` wide at its cell centre, in logit space.

    Returns ``(anchors [1, A, 4], valid [1, A, 1])``; anchors within ``eps`` of the border are
    invalid and set to +inf (their tokens are zeroed before scoring)."""
    boxes = []
    for level, (h, w) in enumerate(shapes):
        gy, gx = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij")
        xy = (torch.stack((gx, gy), -1)[None] + 0.5) / torch.tensor([w, h], dtype=torch.float32, device=device)
        wh = torch.ones_like(xy) * 0.05 * (2.0**level)
        boxes.append(torch.cat((xy, wh), -1).reshape(-1, h * w, 4))
    anchors = torch.cat(boxes, 1)
    valid = ((anchors > eps) & (anchors < 1 - eps)).all(-1, keepdim=True)
    return torch.where(valid, torch.log(anchors / (1 - anchors)), torch.inf), valid


class ECDecoder(SizeBoundBuffers):
    """Query selection, the decoder stack and every head (see the module docstring).

    Args:
        nc: classes. dim: width. ffn: feed-forward width. imgsz: ``(H, W)`` the anchors buffer is
            built for (upstream's ``eval_spatial_size``; other sizes compute theirs).
        masks: segment's mask head (on the encoder's stride-8 map, logits at stride 4).
    """

    anchors: Tensor
    valid_mask: Tensor

    def __init__(self, nc: int, dim: int, ffn: int, imgsz: tuple[int, int], *, depth: int = DECODER_LAYERS,
                 heads: int = DECODER_HEADS, points: tuple[int, ...] = DECODER_POINTS,
                 num_queries: int = NUM_QUERIES, masks: bool = False) -> None:
        super().__init__()
        self.nc, self.num_queries, self.depth, self.heads = nc, num_queries, depth, heads
        self.input_proj = nn.ModuleList(nn.Identity() for _ in STRIDES)  # no-ops: the encoder is `dim` wide
        self.up = nn.Parameter(torch.tensor([0.5]), requires_grad=False)
        self.reg_scale = nn.Parameter(torch.tensor([REG_SCALE]), requires_grad=False)
        self.build_shapes = [(imgsz[0] // s, imgsz[1] // s) for s in STRIDES]
        anchors, valid = generate_anchors(self.build_shapes)
        self.register_buffer("anchors", anchors)
        self.register_buffer("valid_mask", valid)
        self.decoder = DecoderStack(dim, heads, ffn, depth, list(points), masks)
        self.decoder.up, self.decoder.reg_scale = self.up, self.reg_scale  # aliases, as upstream stores them
        self.denoising_class_embed = nn.Embedding(nc + 1, dim, padding_idx=nc)
        self.enc_score_head = nn.Linear(dim, nc)
        self.enc_bbox_head = MLP(dim, dim, 4, 3)
        self.query_pos_head = MLP(4, dim, dim, 3)
        self.pre_bbox_head = MLP(dim, dim, 4, 3)
        self.dec_score_head = nn.ModuleList(nn.Linear(dim, nc) for _ in range(depth))
        self.dec_bbox_head = nn.ModuleList(MLP(dim, dim, 4 * (REG_MAX + 1), 3) for _ in range(depth))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Scores at a 1 % prior, box heads at zero (queries start on their references), Xavier
        query-position head; denoising labels normal (the padding row stays zero)."""
        prior = -math.log((1 - 0.01) / 0.01)
        for head in (self.enc_score_head, *self.dec_score_head):
            nn.init.constant_(head.bias, prior)
        for mlp in (self.enc_bbox_head, self.pre_bbox_head, *self.dec_bbox_head):
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        for layer in self.query_pos_head.layers:
            nn.init.xavier_uniform_(layer.weight)  # type: ignore[arg-type]
        with torch.no_grad():
            nn.init.normal_(self.denoising_class_embed.weight[:-1])

    # ----------------------------------------------------------------- stages
    def flatten_memory(self, feats: list[Tensor]) -> tuple[Tensor, list[tuple[int, int]]]:
        tokens, shapes = [], []
        for feat in feats:
            shapes.append((int(feat.shape[2]), int(feat.shape[3])))
            tokens.append(feat.flatten(2).permute(0, 2, 1))
        return torch.cat(tokens, 1), shapes

    def select_queries(self, memory: Tensor, shapes: list[tuple[int, int]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The best ``num_queries`` tokens. Returns ``(content, reference logits, encoder logits,
        encoder boxes)``: content and references detached; the encoder outputs (``[B, Q, nc]``,
        sigmoid ``[B, Q, 4]``) keep their gradient for the encoder's own loss."""
        if not self.training and shapes == self.build_shapes:
            anchors, valid = self.anchors, self.valid_mask  # the stored values, as upstream's eval reads
        else:
            anchors, valid = generate_anchors(shapes, device=memory.device)
            anchors = anchors.to(memory.dtype)  # float32 as generated: a half model stays half
        memory = valid.to(memory.dtype) * memory
        logits = self.enc_score_head(memory)
        k = min(self.num_queries, memory.shape[1])
        top = logits.max(-1).values.topk(k, dim=-1).indices
        chosen = memory.gather(1, top[..., None].expand(-1, -1, memory.shape[-1]))
        anchor = anchors.expand(memory.shape[0], -1, -1).gather(1, top[..., None].expand(-1, -1, 4))
        reference = self.enc_bbox_head(chosen) + anchor
        enc_logits = logits.gather(1, top[..., None].expand(-1, -1, logits.shape[-1]))
        return chosen.detach(), reference.detach(), enc_logits, reference.sigmoid()

    # ----------------------------------------------------------------- passes
    def forward(self, feats: list[Tensor]) -> dict[str, Tensor]:
        """``pred_logits [B, Q, nc]`` (raw) and ``pred_boxes [B, Q, 4]`` (cx, cy, w, h normalised,
        not clamped) of the last layer; segment adds ``pred_masks [B, Q, H/4, W/4]`` (raw logits,
        from the last layer's queries and the first mask block, as upstream's eval computes them).
        The same in train and eval mode."""
        memory, shapes = self.flatten_memory(feats)
        content, reference, _, _ = self.select_queries(memory, shapes)
        out = self.refine(content, reference, memory, shapes, None, every_layer=False)
        result = {"pred_logits": out["logits"][-1], "pred_boxes": out["boxes"][-1]}
        head = self.decoder.segmentation_head
        if head is not None:
            result["pred_masks"] = head(feats[0], out["hs"], _image_hw(feats[0]))[-1]
        return result

    def forward_train(self, feats: list[Tensor], denoising: DenoisingQueries) -> dict[str, Tensor]:
        """Training: every layer's outputs, layer 0's coarse boxes, the encoder's selection and the
        denoising outputs (see :meth:`refine`; ``dn_*`` hold the first ``D`` queries, the rest
        the matching ones), plus ``up`` and ``reg_scale`` (the loss codes boxes with them).
        Segment adds the mask factors of every layer: ``mask_pixels [L, B, C, H/4, W/4]``,
        ``mask_queries [L, B, N, C]`` (and ``dn_mask_queries``), ``mask_bias [1]``; a query's
        logits are ``<pixels, query> + bias`` (layer 0's are also ``pre``'s)."""
        memory, shapes = self.flatten_memory(feats)
        content, reference, enc_logits, enc_boxes = self.select_queries(memory, shapes)
        # Embedded even when D == 0, so the embedding always takes part in the backward (DDP
        # without find_unused_parameters needs every parameter in every step's graph).
        dn_content = self.denoising_class_embed(denoising.labels).to(content.dtype)
        content = torch.cat((dn_content, content), 1)
        reference = torch.cat((denoising.boxes_unact.to(reference.dtype), reference), 1)
        out = self.refine(content, reference, memory, shapes, denoising.attn_mask, every_layer=True)
        head = self.decoder.segmentation_head
        hs = out.pop("hs")
        if head is not None:
            out["mask_pixels"], out["mask_queries"] = head.factors(feats[0], hs, _image_hw(feats[0]))
        d = denoising.num_queries
        result = {"enc_logits": enc_logits, "enc_boxes": enc_boxes, "up": self.up, "reg_scale": self.reg_scale}
        if head is not None:
            result["mask_pixels"], result["mask_bias"] = out.pop("mask_pixels"), head.bias
        for key, value in out.items():
            axis = 1 if key.startswith("pre_") else 2
            result[key] = value.narrow(axis, d, value.shape[axis] - d)
            result["dn_" + key] = value.narrow(axis, 0, d)
        return result

    def refine(self, content: Tensor, reference_logits: Tensor, memory: Tensor, shapes: list[tuple[int, int]],
               attn_mask: Tensor | None, *, every_layer: bool) -> dict[str, Tensor]:
        """Run the layers. Returns ``logits [L, B, N, nc]``, ``boxes [L, B, N, 4]``, ``corners
        [L, B, N, 4 * 33]``, ``refs [L, B, N, 4]``, ``hs [L, B, N, dim]`` (every layer's, or the
        last layer's only) and layer 0's ``pre_logits [B, N, nc]`` / ``pre_boxes [B, N, 4]``."""
        b, _, dim = memory.shape
        values = list(memory.reshape(b, -1, self.heads, dim // self.heads).permute(0, 2, 3, 1)
                      .split([h * w for h, w in shapes], dim=-1))
        project = weighting_function(REG_MAX, self.up, self.reg_scale)
        reference = reference_logits.sigmoid()
        pos = self.query_pos_head(reference).clamp(min=-10, max=10)
        output = content
        output_detach: Tensor | float = 0.0
        corners_prev: Tensor | float = 0.0
        keep: dict[str, list[Tensor]] = {"logits": [], "boxes": [], "corners": [], "refs": [], "hs": []}
        pre: dict[str, Tensor] = {}
        initial = reference
        for i, layer in enumerate(self.decoder.layers):
            output = layer(output, reference[:, :, None], values, shapes, attn_mask, pos)
            if i == 0:
                pre_boxes = torch.sigmoid(self.pre_bbox_head(output) + inverse_sigmoid(reference))
                pre = {"pre_logits": self.dec_score_head[0](output), "pre_boxes": pre_boxes}
                initial = pre_boxes.detach()
            corners = self.dec_bbox_head[i](output + output_detach) + corners_prev
            box = distance2bbox(initial, integral(corners, project, REG_MAX), self.reg_scale)
            if every_layer or i == self.depth - 1:
                keep["logits"].append(self.decoder.lqe_layers[i](self.dec_score_head[i](output), corners))
                keep["boxes"].append(box)
                keep["corners"].append(corners)
                keep["refs"].append(initial)
                keep["hs"].append(output)
            corners_prev, reference, output_detach = corners, box.detach(), output.detach()
        return {**{k: torch.stack(v) for k, v in keep.items()}, **pre}
