"""The RF-DETR network (upstream's inner LW-DETR): windowed DINOv2 -> projector -> two-stage
query selection -> LW-DETR decoder -> class and box heads (plus a mask or keypoint head).

State-dict keys are the inner LW-DETR's, with no ``model.`` prefix: ``transformer.``,
``class_embed.``, ``bbox_embed.``, ``segmentation_head.`` / ``keypoint_head.``, ``refpoint_embed.``,
``query_feat.``, ``backbone.0.``, in that order, so upstream checkpoints load unchanged.

Training runs ``GROUPS`` (13) independent query groups (Group DETR): 13 x 300 queries, each group
with its own two-stage heads, matched separately; inference uses group 0 only. The same module
returns the same kinds of tensors in both modes; only the number of queries differs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ...layers.normalize import InputNormalize
from ...layers.query_masks import SegmentationHead
from .deformable import DeformableAttention
from .dinov2 import DinoV2Encoder
from .heads import KeypointHead, decode_keypoints
from .projector import Projector
from .transformer import MLP, Transformer, reparam_boxes
from .variants import (
    CROSS_HEADS,
    CROSS_POINTS,
    FFN,
    GROUPS,
    HIDDEN,
    KEYPOINTS,
    OUT_LAYERS,
    SELF_HEADS,
    VIT_WIDTH,
    variant,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Outputs = dict[str, object]
"""``pred_logits``, ``pred_boxes`` (and ``pred_masks`` / ``pred_keypoints``), ``aux_outputs`` (a list
of the same per earlier decoder layer) and ``enc_outputs`` (the two-stage proposals)."""


class Backbone(nn.Module):
    """ViT encoder + projector (upstream's ``backbone.0``)."""

    def __init__(self, patch: int, windows: int, pe_size: int) -> None:
        super().__init__()
        self.encoder = DinoV2Encoder(patch, windows, pe_size)
        self.projector = Projector(VIT_WIDTH, len(OUT_LAYERS), HIDDEN)

    def forward(self, x: Tensor) -> Tensor:
        return self.projector(self.encoder(x))


class RFDETRNet(nn.Module):
    """RF-DETR of ``size`` for ``task`` (``detect``, ``pose`` or ``segment``) and ``nc`` classes.

    The class head has ``nc + 1`` outputs for detect and segment (upstream's layout: one slot past
    the classes that no target ever uses) and ``nc`` for pose (upstream builds pose with one
    class, ``person``).

    Input: ``float [B, 3, H, W]`` RGB in [0, 1], sides multiples of ``patch * windows`` (32 for
    detect); ImageNet normalisation happens inside. See :meth:`upstream_outputs` for the output.
    """

    def __init__(self, size: str = "n", nc: int = 80, task: str = "detect", keypoints: int = KEYPOINTS) -> None:
        super().__init__()
        v = variant(size, task)
        self.size, self.task, self.nc, self.variant = size, task, nc, v
        self.queries, self.groups = v.queries, GROUPS
        nc_out = nc if task == "pose" else nc + 1
        self.normalize = InputNormalize(IMAGENET_MEAN, IMAGENET_STD)
        self.transformer = Transformer(nc_out, HIDDEN, v.decoder_layers, SELF_HEADS, CROSS_HEADS, CROSS_POINTS,
                                       FFN, GROUPS)
        self.class_embed = nn.Linear(HIDDEN, nc_out)
        self.bbox_embed = MLP(HIDDEN, HIDDEN, 4, 3)
        self.segmentation_head = SegmentationHead(HIDDEN, v.decoder_layers) if task == "segment" else None
        self.keypoint_head = KeypointHead(HIDDEN, keypoints) if task == "pose" else None
        self.refpoint_embed = nn.Embedding(v.queries * GROUPS, 4)
        self.query_feat = nn.Embedding(v.queries * GROUPS, HIDDEN)
        self.backbone = nn.ModuleList([Backbone(v.patch, v.windows, v.pe_size)])
        self.train_queries: int | None = None
        self.train_groups: int | None = None
        self._initialize()

    def _initialize(self) -> None:
        """Upstream's starting point: class heads at a 1 % prior, zero box deltas (each query starts
        on its reference box), zero reference offsets, Xavier projections in the transformer."""
        for p in self.transformer.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for module in self.transformer.modules():
            if isinstance(module, DeformableAttention):
                module.reset_parameters()
        prior = -math.log((1 - 0.01) / 0.01)
        for head in (self.class_embed, *self.transformer.enc_out_class_embed):
            nn.init.constant_(head.bias, prior)
        for mlp in (self.bbox_embed, *self.transformer.enc_out_bbox_embed):
            nn.init.zeros_(mlp.layers[-1].weight)
            nn.init.zeros_(mlp.layers[-1].bias)
        nn.init.zeros_(self.refpoint_embed.weight)

    # ------------------------------------------------------------------------------------------
    def set_training_queries(self, queries: int | None = None, groups: int | None = None) -> None:
        """Train with fewer queries per group and/or fewer groups than the architecture holds
        (None: all of them). For small images and quick runs: a 64-pixel image has only 4 x 4
        tokens to select from, and 13 x 300 queries are most of a CPU step there. The unused rows
        of ``refpoint_embed`` / ``query_feat`` and the unused groups' heads keep their values (and
        get no gradient); inference is unchanged."""
        for name, value, limit in (("queries", queries, self.queries), ("groups", groups, self.groups)):
            if value is not None and not 1 <= value <= limit:
                raise ValueError(f"training {name}={value} must be in [1, {limit}]")
        self.train_queries, self.train_groups = queries, groups

    def _query_layout(self) -> tuple[int, int]:
        if not self.training:
            return self.queries, 1
        return self.train_queries or self.queries, self.train_groups or self.groups

    def _embeddings(self, queries: int, groups: int) -> tuple[Tensor, Tensor]:
        """Rows ``[g * Q_arch, g * Q_arch + queries)`` of each used group's block."""
        if queries == self.queries:
            rows = slice(0, queries * groups)
            return self.refpoint_embed.weight[rows], self.query_feat.weight[rows]
        index = (torch.arange(groups, device=self.query_feat.weight.device)[:, None] * self.queries
                 + torch.arange(queries, device=self.query_feat.weight.device)).flatten()
        return self.refpoint_embed.weight[index], self.query_feat.weight[index]

    def forward(self, images: Tensor, mask_factors: bool | None = None) -> Outputs:
        """Images in [0, 1] -> :meth:`upstream_outputs` of the normalised images."""
        return self.upstream_outputs(self.normalize(images), mask_factors)

    def upstream_outputs(self, x: Tensor, mask_factors: bool | None = None) -> Outputs:
        """Upstream's forward on its own input convention (ImageNet-normalised images).

        Returns a dict: ``pred_logits [B, Q, C]`` raw, ``pred_boxes [B, Q, 4]`` cx, cy, w, h
        normalised to the input (not clamped), from the last decoder layer; ``aux_outputs`` the
        same per earlier layer; ``enc_outputs`` the selected proposals (``[B, G*k, ...]``, k =
        min(Q, tokens)). Pose adds ``pred_keypoints [B, Q, K, 3]`` (x, y normalised, visibility
        logit) to every entry. Segment adds ``pred_masks [B, Q, H/4, W/4]`` (raw logits) in eval
        mode; in training ``mask_pixels [B, C, H/4, W/4]``, ``mask_queries [B, Q, C]`` and
        ``mask_bias [B]`` instead, whose ``einsum("bchw,bqc->bqhw") + bias`` are those logits.
        ``mask_factors`` chooses the factors (True: what the loss reads, also in eval mode for
        validation losses) or the logits (False); None: the factors in training mode only.
        """
        factors = self.training if mask_factors is None else mask_factors
        queries, groups = self._query_layout()
        memory_map = self.backbone[0](x)
        b, _, h, w = memory_map.shape
        memory = memory_map.flatten(2).transpose(1, 2)
        shapes = [(h, w)]
        enc_feats, enc_boxes, enc_logits = self.transformer.select(memory, shapes, queries, groups)
        refpoints, tgt = self._embeddings(queries, groups)
        refpoints = refpoints[None].expand(b, -1, -1)
        ts = enc_boxes.shape[1]
        reference = torch.cat((reparam_boxes(refpoints[:, :ts], enc_boxes.detach()), refpoints[:, ts:]), 1)
        hs = self.transformer.decoder(tgt[None].expand(b, -1, -1).contiguous(), reference, memory, shapes, groups)
        boxes = reparam_boxes(self.bbox_embed(hs), reference[None])
        logits = self.class_embed(hs)
        extra = self._extras(hs, reference, memory_map, x.shape[-2:], factors)
        enc_extra = self._extras(enc_feats[None], enc_boxes[None], memory_map, x.shape[-2:], factors, encoder=True)
        layers = [{"pred_logits": logits[i], "pred_boxes": boxes[i], **{k: v[i] for k, v in extra.items()}}
                  for i in range(len(hs))]
        return {**layers[-1], "aux_outputs": layers[:-1],
                "enc_outputs": {"pred_logits": enc_logits, "pred_boxes": enc_boxes,
                                **{k: v[0] for k, v in enc_extra.items()}}}

    def _extras(self, hs: Tensor, reference: Tensor, memory_map: Tensor, image_hw: torch.Size, factors: bool,
                encoder: bool = False) -> dict[str, Tensor]:
        """Per layer ``[L, B, Q, ...]``: keypoints (pose) or mask logits (segment); none for detect."""
        if self.keypoint_head is not None:
            return {"pred_keypoints": decode_keypoints(self.keypoint_head(hs), reference)}
        if self.segmentation_head is not None:
            hw = (int(image_hw[0]), int(image_hw[1]))
            if not factors:
                return {"pred_masks": self.segmentation_head(memory_map, hs, hw, skip_blocks=encoder)}
            # The loss: the factors only (dense logits of every group's queries would not fit).
            pixels, queries = self.segmentation_head.factors(memory_map, hs, hw, skip_blocks=encoder)
            bias = self.segmentation_head.bias.expand(len(hs), memory_map.shape[0])
            return {"mask_pixels": pixels, "mask_queries": queries, "mask_bias": bias}
        return {}
