"""What the instance tasks (``segment``, ``pose``) and the families that implement them agree on:
the training targets a family's loss reads and the per-image predictions its post-processing
returns. Both extend detection's: the boxes keep detect's layout, so a family's box matching
reads them unchanged, and masks or keypoints ride along row for row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from ..layers.set_postprocess import topk_detections, topk_queries

MASK_STRIDE = 4
"""Training target masks are ``1 / MASK_STRIDE`` of the network input per side, the resolution
the query mask heads predict at (``layers.query_masks``)."""


@dataclass
class InstanceTargets:
    """A batch's ground truth for an instance task, on the host (pinned when training on CUDA).

    Attributes:
        boxes: ``float32 [M, 6]`` rows (image index, class, cx, cy, w, h), boxes normalised to the
            ``S x S`` input: detect's target schema.
        masks: segment: ``uint8 [M, S / 4, S / 4]`` each row's mask (1 inside) over the whole
            input; None for pose.
        keypoints: pose: ``float32 [M, K, 3]`` each row's keypoints, x and y normalised to the
            input, then the visibility (0 not labelled, 1 labelled but hidden, 2 visible); a
            keypoint with visibility 0 has no meaningful position. None for segment.
        sigmas: pose: ``float32 [K]`` the dataset's OKS sigmas (a keypoint's positional
            tolerance relative to the object's size), for losses that score OKS.
    """

    boxes: Tensor
    masks: Tensor | None = None
    keypoints: Tensor | None = None
    sigmas: Tensor | None = None

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    def pin_memory(self) -> InstanceTargets:
        return replace(self, boxes=self.boxes.pin_memory(),
                       masks=None if self.masks is None else self.masks.pin_memory(),
                       keypoints=None if self.keypoints is None else self.keypoints.pin_memory())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> InstanceTargets:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=non_blocking)

        return InstanceTargets(self.boxes.to(device, non_blocking=non_blocking), move(self.masks),
                               move(self.keypoints), move(self.sigmas))


@dataclass
class InstancePrediction:
    """One image's post-processed instances, best first, in network-input pixels.

    Attributes:
        det: ``float [N, 6]`` x1, y1, x2, y2, score, class id.
        masks: segment: ``float [N, h, w]`` mask logits over the whole input at ``h = H / s``
            (the family's mask resolution; positive: inside); None for pose.
        keypoints: pose: ``float [N, K, 3]`` x, y and a confidence in [0, 1] per keypoint;
            None for segment.
    """

    det: Tensor
    masks: Tensor | None = None
    keypoints: Tensor | None = None

    def __len__(self) -> int:
        return int(self.det.shape[0])

    def to(self, device: torch.device | str) -> InstancePrediction:
        return InstancePrediction(self.det.to(device), None if self.masks is None else self.masks.to(device),
                                  None if self.keypoints is None else self.keypoints.to(device))


def random_instance_targets(batch: int, nc: int, generator: torch.Generator, *, imgsz: int,
                            masks: bool = False, keypoints: int | None = None) -> InstanceTargets:
    """Plausible instance targets for ``batch`` images (the parity tool's step): 1-3 boxes per
    image, each with a filled box mask (segment) or keypoints spread inside its box (pose)."""
    rows, mask_list, kp_list = [], [], []
    side = max(1, imgsz // MASK_STRIDE)
    for b in range(batch):
        for _ in range(int(torch.randint(1, 4, (), generator=generator))):
            cx, cy = (0.25 + 0.5 * torch.rand(2, generator=generator)).tolist()
            w, h = (0.1 + 0.3 * torch.rand(2, generator=generator)).tolist()
            rows.append([float(b), float(torch.randint(0, nc, (), generator=generator)), cx, cy, w, h])
            if masks:
                m = torch.zeros(side, side, dtype=torch.uint8)
                m[int((cy - h / 2) * side):max(int((cy + h / 2) * side), int((cy - h / 2) * side) + 1),
                  int((cx - w / 2) * side):max(int((cx + w / 2) * side), int((cx - w / 2) * side) + 1)] = 1
                mask_list.append(m)
            if keypoints:
                xy = torch.rand(keypoints, 2, generator=generator) - 0.5
                xy = xy * torch.tensor([w, h]) + torch.tensor([cx, cy])
                kp_list.append(torch.cat((xy, torch.full((keypoints, 1), 2.0)), 1))
    boxes = torch.tensor(rows, dtype=torch.float32).reshape(-1, 6)
    return InstanceTargets(
        boxes,
        masks=torch.stack(mask_list) if masks else None,
        keypoints=torch.stack(kp_list) if keypoints else None,
        sigmas=torch.full((keypoints,), 0.1) if keypoints else None)


def set_predictor_postprocess(task: str, outputs: Any, options: Any) -> list[Any]:
    """A set predictor's post-processing (RF-DETR, EC): the top ``max_det`` (query, class) pairs per
    image above ``conf``, no NMS (``iou`` and ``agnostic`` do not apply). Segment and pose: per
    image an ``InstancePrediction`` with the chosen queries' masks or keypoints."""
    if task == "detect":
        return topk_detections(outputs, conf=options.conf, max_det=options.max_det, classes=options.classes)
    det, extra = outputs
    out = []
    for (rows, query), per_query in zip(topk_queries(det, conf=options.conf, max_det=options.max_det,
                                                     classes=options.classes), extra):
        chosen = per_query[query]
        out.append(InstancePrediction(rows, masks=chosen if task == "segment" else None,
                                      keypoints=chosen.float() if task == "pose" else None))
    return out
