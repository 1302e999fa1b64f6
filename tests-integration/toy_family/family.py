"""The toy family: a tiny one-level anchor-free detector built only from the zoo's shared layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from libreyolo_models import Family, LossContext, LossResult
from libreyolo_models.layers.anchors import distances_to_boxes, make_anchors
from libreyolo_models.layers.assign import TaskAlignedAssigner, pad_targets
from libreyolo_models.layers.boxes import aligned_iou, xywh_to_xyxy
from libreyolo_models.layers.conv import Conv
from libreyolo_models.layers.nms import nms_per_image
from libreyolo_models.layers.targets import random_box_targets

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


class ToyFamily(Family):
    def build_network(self) -> nn.Module:
        return ToyNet(self.size, self.nc)

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        return int(state["head.weight"].shape[0]) - 4

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
        items = torch.stack((iou_sum * ctx.gains["iou"], cls_sum * ctx.gains["cls"])) * (ctx.world_size / norm)
        return LossResult(items.sum() * (ctx.global_batch or b), items.detach())

    def postprocess(self, outputs: Tensor, options: Any) -> list[Tensor]:
        return nms_per_image(outputs.float(), conf=options.conf, iou=options.iou, max_det=options.max_det,
                             classes=options.classes, agnostic=options.agnostic)

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        return random_box_targets(batch, self.nc, generator)
