"""The toy family: a tiny one-level anchor-free detector built only from the zoo's shared layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from libreyolo_models import DetectorFamily, LossContext, LossResult
from libreyolo_models.layers.anchors import distances_to_boxes, make_anchors
from libreyolo_models.layers.assign import TaskAlignedAssigner, pad_targets
from libreyolo_models.layers.boxes import aligned_iou, xywh_to_xyxy
from libreyolo_models.layers.conv import Conv

WIDTHS = {"n": 16, "s": 32}


class ToyNet(nn.Module):
    def __init__(self, size: str, nc: int) -> None:
        super().__init__()
        w = WIDTHS[size]
        self.body = nn.Sequential(Conv(3, w, 3, 2), Conv(w, w, 3, 2), Conv(w, 2 * w, 3, 2), Conv(2 * w, 2 * w, 3, 2),
                                  Conv(2 * w, 4 * w, 3, 2))
        self.head = nn.Conv2d(4 * w, 4 + nc, 1)
        self.nc = nc

    def forward(self, x: Tensor) -> Tensor:
        """``[B, 4 + nc, H/32, W/32]``: l, t, r, b distance logits, then class logits."""
        return self.head(self.body(x))


def decode(raw: Tensor) -> tuple[Tensor, Tensor]:
    """Raw map -> xyxy boxes in pixels ``[B, A, 4]`` and class logits ``[B, A, nc]``."""
    b, _, h, w = raw.shape
    anchors, strides = make_anchors([(h, w)], [32], device=raw.device, dtype=raw.dtype)
    flat = raw.flatten(2).transpose(1, 2)
    boxes = distances_to_boxes(F.softplus(flat[..., :4]) * 2, anchors) * strides
    return boxes, flat[..., 4:]


class ToyFamily(DetectorFamily):
    """The detector base supplies infer_nc (from ``head_key``), NMS post-processing and sample
    targets; the toy writes its network, seams and loss."""

    head_key = "head.weight"
    head_extra_classes = 4  # the four box distances share the head's output rows

    def build_network(self) -> nn.Module:
        return ToyNet(self.size, self.nc)

    def make_loss(self, gains: Mapping[str, float]) -> Any:
        return dict(gains)  # the toy's loss is a function of the gains alone

    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        boxes, logits = decode(net(images))
        return torch.cat((boxes, logits.sigmoid()), -1).transpose(1, 2)  # [B, 4 + nc, A]

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        return net(images)

    def compute_loss(self, outputs: Tensor, targets: Tensor, ctx: LossContext) -> LossResult:
        raw = outputs.float()
        boxes, logits = decode(raw)
        b, _, h, w = raw.shape
        anchors, strides = make_anchors([(h, w)], [32], device=raw.device, dtype=raw.dtype)
        padded, mask = pad_targets(targets.float(), b)
        padded = padded.to(raw.device)
        gt_boxes = xywh_to_xyxy(padded[..., 1:5] * torch.tensor([w * 32, h * 32] * 2, device=raw.device))
        assigned = TaskAlignedAssigner(topk=4)(logits.detach().sigmoid(), boxes.detach(), anchors * strides,
                                              padded[..., 0].long(), gt_boxes, mask.to(raw.device))
        weight = assigned.scores.sum(-1)
        cls_sum = F.binary_cross_entropy_with_logits(logits, assigned.scores, reduction="sum")
        target = torch.where(assigned.foreground[..., None], assigned.boxes, boxes.detach())
        iou_sum = ((1 - aligned_iou(boxes, target)) * weight).sum()
        local = assigned.scores.sum().detach()
        norm = (ctx.normalizer_sum(local) if ctx.normalizer_sum else local).clamp(min=1.0)
        gains = self.loss_for(ctx)
        items = torch.stack((iou_sum * gains["iou"], cls_sum * gains["cls"])) * (ctx.world_size / norm)
        return LossResult(items.sum() * (ctx.global_batch or b), items.detach())
