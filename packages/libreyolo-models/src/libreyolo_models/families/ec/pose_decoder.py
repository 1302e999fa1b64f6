"""EC's pose decoder (upstream's ``ECPoseTransformer``, DETRPose style) under ``decoder.``.

Each of 60 queries is a person: one instance token followed by 17 keypoint tokens. Query selection
scores every memory token (two classes: person and background), and the best tokens propose 17
keypoints around their cell (an MLP's offsets on the token's anchor point, in logit space). Each
layer: self-attention within a person's 18 tokens (keypoint tokens carry a sine embedding of
their keypoint's position), self-attention across persons for the same token, deformable
cross-attention from every token at its keypoint (4 points per level), a gate and a ReLU
feed-forward. Keypoints are refined like D-FINE boxes: layer 0 predicts coarse keypoints, then
each layer adds 33-bin x and y offset distributions (FDR); a quality head (LQE) samples the
stride-8 map at the predicted keypoints and adds a score to the person logit.

Training: ``forward_train`` optionally puts DETRPose's contrastive denoising queries
(``pose_denoising``, built from the keypoint targets; embedded with ``label_enc`` / ``pose_enc``)
in front of the matching queries.
Module names are upstream's checkpoint keys; ``anchors`` (points, logit space) and ``valid_mask``
(True where the anchor is *invalid*, upstream's convention) are stored for the build size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...layers.detr.anchors import SizeBoundBuffers
from .decoder import MLP, Gate, inverse_sigmoid
from .fdr import integral, weighting_function
from .pose_denoising import PoseDenoising
from .variants import (
    DECODER_HEADS,
    KEYPOINTS,
    POSE_CLASSES,
    POSE_POINTS,
    POSE_QUERIES,
    REG_MAX,
    REG_SCALE,
    STRIDES,
)


def pose_anchors(shapes: list[tuple[int, int]], device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    """A point per token at its cell centre, in logit space: ``(anchors [1, A, 2], invalid
    [1, A, 1])``, invalid within 0.01 of the border (those tokens are zeroed before scoring)."""
    points = []
    for h, w in shapes:
        gy, gx = torch.meshgrid(torch.linspace(0, h - 1, h, device=device), torch.linspace(0, w - 1, w, device=device),
                                indexing="ij")
        grid = (torch.stack((gx, gy), -1)[None] + 0.5) / torch.tensor([w, h], dtype=torch.float32, device=device)
        points.append(grid.view(1, -1, 2))
    anchors = torch.cat(points, 1)
    valid = ((anchors > 0.01) & (anchors < 0.99)).all(-1, keepdim=True)
    return torch.log(anchors / (1 - anchors)), ~valid


class PoseDeformableAttention(nn.Module):
    """Deformable cross-attention with ``points`` per level; reference points (x, y) in [0, 1],
    offsets in pixels of each level."""

    def __init__(self, dim: int, levels: int, heads: int, points: int) -> None:
        super().__init__()
        self.levels, self.heads, self.points = levels, heads, points
        self.sampling_offsets = nn.Linear(dim, heads * levels * points * 2)
        self.attention_weights = nn.Linear(dim, heads * levels * points)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.heads, dtype=torch.float32) * (2.0 * math.pi / self.heads)
        ring = torch.stack((angles.cos(), angles.sin()), -1)
        ring = ring / ring.abs().max(-1, keepdim=True).values
        grid = ring.view(self.heads, 1, 1, 2).repeat(1, self.levels, self.points, 1)
        grid = grid * (torch.arange(self.points) % 4 + 1).view(1, 1, -1, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.flatten() if self.points % 4 == 0 else torch.zeros_like(grid.flatten()))
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)

    def forward(self, query: Tensor, reference: Tensor, values: list[Tensor], shapes: list[tuple[int, int]]) -> Tensor:
        """``query [B, N, dim]``, ``reference [B, N, 2]``; ``values`` per level
        ``[B * heads, head_dim, h*w]`` -> ``[B, N, dim]``."""
        b, n, _ = query.shape
        offsets = self.sampling_offsets(query).view(b, n, self.heads, self.levels, self.points, 2)
        weights = self.attention_weights(query).view(b, n, self.heads, self.levels * self.points).softmax(-1)
        # Each level's (w, h) filled on the device: a tensor built from these Python numbers would be
        # a host-to-device copy, which CUDA graph capture refuses.
        normalizer = torch.stack([torch.stack((query.new_full((), w), query.new_full((), h))) for h, w in shapes])
        locations = reference[:, :, None, None, None, :] + offsets / normalizer.view(1, 1, 1, self.levels, 1, 2)
        grids = (2 * locations - 1).transpose(1, 2).flatten(0, 1)       # [B*heads, N, levels, points, 2]
        sampled = [F.grid_sample(v.unflatten(2, (h, w)), grids[:, :, level], mode="bilinear", padding_mode="zeros",
                                 align_corners=False) for level, (v, (h, w)) in enumerate(zip(values, shapes))]
        mix = weights.transpose(1, 2).reshape(b * self.heads, 1, n, self.levels * self.points)
        head_dim = values[0].shape[1]
        return (torch.cat(sampled, -1) * mix).sum(-1).view(b, self.heads * head_dim, n).transpose(1, 2)


class PoseDecoderLayer(nn.Module):
    def __init__(self, dim: int, ffn: int, levels: int = len(STRIDES), heads: int = DECODER_HEADS,
                 points: int = POSE_POINTS) -> None:
        super().__init__()
        self.within_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.within_norm = nn.LayerNorm(dim)
        self.across_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.across_norm = nn.LayerNorm(dim)
        self.cross_attn = PoseDeformableAttention(dim, levels, heads, points)
        self.gateway = Gate(dim)
        self.linear1 = nn.Linear(dim, ffn)
        self.linear2 = nn.Linear(ffn, dim)
        self.norm2 = nn.LayerNorm(dim)
        nn.init.xavier_uniform_(self.linear1.weight)
        nn.init.xavier_uniform_(self.linear2.weight)

    @staticmethod
    def with_pos(x: Tensor, pos: Tensor) -> Tensor:
        """Positions on the keypoint tokens only (the instance token, first, has none)."""
        k = pos.shape[2]
        return torch.cat((x[:, :, :-k], x[:, :, -k:] + pos), 2)

    def forward(self, tgt: Tensor, pos: Tensor, reference: Tensor, attn_mask: Tensor | None, values: list[Tensor],
                shapes: list[tuple[int, int]]) -> Tensor:
        """``tgt [B, Q, 1 + K, dim]``, ``pos [B, Q, K, dim]``, ``reference [B, Q, 1 + K, 2]``."""
        b, q, t, d = tgt.shape
        qk = self.with_pos(tgt, pos).flatten(0, 1)
        within = self.within_attn(qk, qk, tgt.flatten(0, 1), need_weights=False)[0].reshape(b, q, t, d)
        tgt = self.within_norm(tgt + within)
        tokens = tgt.transpose(1, 2).flatten(0, 1)                      # [B * (1 + K), Q, dim]
        across = self.across_attn(tokens, tokens, tokens, attn_mask=attn_mask, need_weights=False)[0]
        tgt = self.across_norm(tokens + across).reshape(b, t, q, d).transpose(1, 2)
        cross = self.cross_attn(self.with_pos(tgt, pos).flatten(1, 2), reference.flatten(1, 2), values, shapes)
        tgt = self.gateway(tgt, cross.reshape(b, q, t, d))
        tgt = tgt + self.linear2(F.relu(self.linear1(tgt)))
        return self.norm2(tgt.clamp(min=-65504, max=65504))


class PoseLQE(nn.Module):
    """Adds to the person logit a score from the stride-8 map sampled at the predicted keypoints
    (each keypoint's top-4 channel values and their mean)."""

    def __init__(self, keypoints: int = KEYPOINTS, k: int = 4, hidden: int = 256) -> None:
        super().__init__()
        self.k, self.keypoints = k, keypoints
        self.reg_conf = MLP(keypoints * (k + 1), hidden, 1, 2, act="relu")

    def forward(self, scores: Tensor, keypoints: Tensor, feat: Tensor) -> Tensor:
        b, n = keypoints.shape[:2]
        sampled = F.grid_sample(feat, 2 * keypoints.reshape(b, n, self.keypoints, 2) - 1, mode="bilinear",
                                padding_mode="zeros", align_corners=False).permute(0, 2, 3, 1)
        top = sampled.topk(self.k, dim=-1).values
        return scores + self.reg_conf(torch.cat((top, top.mean(-1, keepdim=True)), -1).reshape(b, n, -1))


class PoseDecoderStack(nn.Module):
    dim_t: Tensor

    def __init__(self, dim: int, ffn: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(PoseDecoderLayer(dim, ffn) for _ in range(depth))
        self.half_pose_ref_point_head = MLP(dim, dim, dim, 2, act="relu")
        steps = torch.arange(dim // 2, dtype=torch.float32)
        self.register_buffer("dim_t", 10000 ** (2 * (steps // 2) / (dim // 2)))

    def sine_embedding(self, points: Tensor) -> Tensor:
        """``[..., 2]`` (x, y) in [0, 1] -> ``[..., dim]`` sine embedding, (y, x) halves."""
        def embed(v: Tensor) -> Tensor:
            v = v * (2 * math.pi) / self.dim_t
            return torch.stack((v[..., 0::2].sin(), v[..., 1::2].cos()), dim=4).flatten(3)
        return torch.cat((embed(points[..., 1:2]), embed(points[..., 0:1])), dim=3)


class ECPoseDecoder(SizeBoundBuffers):
    """The pose decoder (see the module docstring); ``imgsz`` is the build size of ``anchors``."""

    anchors: Tensor
    valid_mask: Tensor

    def __init__(self, dim: int, ffn: int, depth: int, imgsz: tuple[int, int], *, keypoints: int = KEYPOINTS,
                 num_queries: int = POSE_QUERIES, classes: int = POSE_CLASSES, heads: int = DECODER_HEADS) -> None:
        super().__init__()
        self.keypoints, self.num_queries, self.heads, self.depth = keypoints, num_queries, heads, depth
        self.decoder = PoseDecoderStack(dim, ffn, depth)
        self.keypoint_embedding = nn.Embedding(keypoints, dim)
        self.instance_embedding = nn.Embedding(1, dim)
        self.tgt_embed = nn.Embedding(num_queries, dim)
        self.label_enc = nn.Embedding(80 + 1, dim)   # DETRPose's denoising label embedding (81 wide)
        self.pose_enc = nn.Embedding(keypoints, dim)
        self.enc_output = nn.Linear(dim, dim)
        self.enc_output_norm = nn.LayerNorm(dim)
        self.class_embed = nn.ModuleList(nn.Linear(dim, classes) for _ in range(depth))
        self.lqe_embed = nn.ModuleList(PoseLQE(keypoints) for _ in range(depth))
        self.pose_embed = nn.ModuleList(MLP(dim, dim, 2 * (REG_MAX + 1), 3, act="relu") for _ in range(depth))
        self.pre_pose_embed = MLP(dim, dim, 2, 3, act="relu")
        self.up = nn.Parameter(torch.tensor([0.5]), requires_grad=False)
        self.reg_scale = nn.Parameter(torch.tensor([REG_SCALE]), requires_grad=False)
        self.enc_pose_embed = MLP(dim, 2 * dim, 2 * keypoints, 4, act="relu")
        self.enc_out_class_embed = nn.Linear(dim, classes)
        self.build_shapes = [(imgsz[0] // s, imgsz[1] // s) for s in STRIDES]
        anchors, invalid = pose_anchors(self.build_shapes)
        self.register_buffer("anchors", anchors)
        self.register_buffer("valid_mask", invalid)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Upstream's order: Xavier on every matrix (the heads' last layers included, so they do not
        start at zero), then the deformable offsets on their rings; class heads at a 1 % prior, the
        offset heads' last biases at zero."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for m in self.modules():
            if isinstance(m, PoseDeformableAttention):
                m.reset_parameters()
        prior = -math.log((1 - 0.01) / 0.01)
        for head in (*self.class_embed, self.enc_out_class_embed):
            nn.init.constant_(head.bias, prior)
        lasts = [mlp.layers[-1] for mlp in (*self.pose_embed, self.pre_pose_embed, self.enc_pose_embed)]
        lasts += [lqe.reg_conf.layers[-1] for lqe in self.lqe_embed if isinstance(lqe, PoseLQE)]
        for last in lasts:
            if isinstance(last, nn.Linear):
                nn.init.zeros_(last.bias)

    def select(self, feats: list[Tensor]) -> tuple[Tensor, Tensor, Tensor, list[Tensor], list[tuple[int, int]]]:
        """Query selection: ``(queries [B, Q, 1 + K, dim], reference points [B, Q, 1 + K, 2],
        encoder logits [B, Q, classes], values, shapes)``; the encoder's keypoints are the
        reference's last K points (centre first, their mean)."""
        shapes = [(int(f.shape[2]), int(f.shape[3])) for f in feats]
        memory = torch.cat([f.flatten(2).permute(0, 2, 1) for f in feats], 1)
        if not self.training and shapes == self.build_shapes:
            anchors, invalid = self.anchors, self.valid_mask
        else:
            anchors, invalid = pose_anchors(shapes, memory.device)
        b = memory.shape[0]
        projected = self.enc_output_norm(self.enc_output(memory.masked_fill(invalid, 0.0)))
        logits = self.enc_out_class_embed(projected)
        k = min(self.num_queries, memory.shape[1])
        top = logits.max(-1).values.topk(k, dim=1).indices
        enc_logits = logits.gather(1, top[..., None].expand(-1, -1, logits.shape[-1]))
        chosen = projected.gather(1, top[..., None].expand(-1, -1, projected.shape[-1]))
        anchor = anchors.expand(b, -1, -1).gather(1, top[..., None].expand(-1, -1, 2))
        offsets = self.enc_pose_embed(chosen).reshape(b, k, self.keypoints, 2)
        points = torch.sigmoid(offsets + anchor[:, :, None])
        reference = torch.cat((points.mean(2, keepdim=True), points), 2)
        content = self.tgt_embed.weight[:k][None, :, None].expand(b, -1, -1, -1)
        queries = torch.cat((self.instance_embedding.weight[None, None].expand(b, k, -1, -1),
                             self.keypoint_embedding.weight[None, None].expand(b, k, -1, -1) + content), 2)
        values = list(memory.unflatten(2, (self.heads, -1)).permute(0, 2, 3, 1).flatten(0, 1)
                      .split([h * w for h, w in shapes], dim=-1))
        return queries, reference, enc_logits, values, shapes

    def forward(self, feats: list[Tensor]) -> dict[str, Tensor]:
        """``pred_logits [B, 60, 2]`` (person, background; raw) and ``pred_keypoints [B, 60, 34]``
        (x1, y1, ..., x17, y17 normalised to the input) of the last layer."""
        queries, reference, _, values, shapes = self.select(feats)
        out = self.refine(queries, reference.detach(), values, shapes, feats[0], None, every_layer=False)
        return {"pred_logits": out["logits"][-1], "pred_keypoints": out["keypoints"][-1].flatten(-2)}

    def refine(self, tgt: Tensor, reference: Tensor, values: list[Tensor], shapes: list[tuple[int, int]],
               feat: Tensor, attn_mask: Tensor | None, *, every_layer: bool) -> dict[str, Tensor]:
        """Run the layers: ``logits [L, B, N, classes]``, ``keypoints [L, B, N, K, 2]``,
        ``corners [L, B, N, K, 66]``, ``refs [L, B, N, K, 2]`` (every layer's, or the last's),
        and layer 0's ``pre_logits`` / ``pre_keypoints``."""
        project = weighting_function(REG_MAX, self.up, self.reg_scale)
        reg_scale = self.reg_scale.abs()
        keep: dict[str, list[Tensor]] = {"logits": [], "keypoints": [], "corners": [], "refs": []}
        pre: dict[str, Tensor] = {}
        output = tgt
        detach_prev: Tensor | float = 0.0
        corners_prev: Tensor | float = 0.0
        initial = reference[:, :, 1:]
        for i, layer in enumerate(self.decoder.layers):
            keypoint_refs = reference[:, :, 1:]
            pos = self.decoder.half_pose_ref_point_head(self.decoder.sine_embedding(keypoint_refs))
            output = layer(output, pos, reference, attn_mask, values, shapes)
            out_pose, out_instance = output[:, :, 1:], output[:, :, 0]
            if i == 0:
                pre_keypoints = torch.sigmoid(self.pre_pose_embed(out_pose) + inverse_sigmoid(keypoint_refs))
                pre = {"pre_logits": self.class_embed[0](out_instance), "pre_keypoints": pre_keypoints}
                initial = pre_keypoints.detach()
            corners = self.pose_embed[i](out_pose + detach_prev) + corners_prev
            keypoints = initial + integral(corners, project, REG_MAX) / reg_scale
            reference = torch.cat((keypoints.mean(2, keepdim=True), keypoints), 2)
            if every_layer or i == self.depth - 1:
                logits = self.lqe_embed[i](self.class_embed[i](out_instance), keypoints, feat)
                keep["logits"].append(logits)
                keep["keypoints"].append(keypoints)
                keep["corners"].append(corners)
                keep["refs"].append(initial)
            corners_prev = corners
            if self.training:
                reference, detach_prev = reference.detach(), out_pose.detach()
            else:
                detach_prev = out_pose
        return {**{k: torch.stack(v) for k, v in keep.items()}, **pre}

    def forward_train(self, feats: list[Tensor], denoising: PoseDenoising | None = None) -> dict[str, Tensor]:
        """Training: every layer's ``logits`` / ``keypoints`` / ``corners`` / ``refs``, ``pre_*``,
        the encoder's ``enc_logits [B, Q, classes]`` / ``enc_keypoints [B, Q, K, 2]`` and ``up`` /
        ``reg_scale``; with ``denoising``, its ``D`` queries go first and every per-query output
        has a ``dn_`` twin holding them (the un-prefixed ones hold the matching queries)."""
        queries, proposals, enc_logits, values, shapes = self.select(feats)
        reference = proposals.detach()
        d = denoising.num_queries if denoising is not None else 0
        mask = None
        if denoising is not None:
            b = queries.shape[0]
            # The embeddings take part even when D == 0 (DDP needs every parameter reached).
            embedded = torch.cat((self.label_enc(denoising.labels)[:, :, None],
                                  self.pose_enc.weight[None, None].expand(b, d, -1, -1)), 2)
            content = torch.where(denoising.valid[:, :, None, None], embedded, torch.zeros_like(embedded))
            queries = torch.cat((content.to(queries.dtype), queries), 1)
            reference = torch.cat((denoising.points_unact.sigmoid().to(reference.dtype), reference), 1)
            mask = denoising.attn_mask
        out = self.refine(queries, reference, values, shapes, feats[0], mask, every_layer=True)
        result = {"enc_logits": enc_logits, "enc_keypoints": proposals[:, :, 1:], "up": self.up,
                  "reg_scale": self.reg_scale}
        if denoising is None:
            return {**out, **result}
        for key, value in out.items():
            axis = 1 if key.startswith("pre_") else 2
            result[key] = value.narrow(axis, d, value.shape[axis] - d)
            result["dn_" + key] = value.narrow(axis, 0, d)
        if d == 0:  # keep the denoising embeddings in the graph
            result["logits"] = result["logits"] + 0.0 * (self.label_enc.weight.sum() + self.pose_enc.weight.sum())
        return result
