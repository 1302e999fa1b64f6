"""Mask IoU and one image's mask statistics for validation (COCO ``segm``: mask IoU, at most 100
detections per class and image, ``tasks.instances.matching``).

Masks are compared over the part of the letterboxed input the image covers (the bars are not the
image), at the input's resolution: predicted logits (``1 / 4`` of the side) are resized bilinearly
to it and thresholded at 0, ground truth is the exact mask carried through the letterbox. The
resizing and the IoU run where the predicted masks are (the GPU in a GPU validation: on the host
they were most of a 320-pixel validation's time), the matching on the host.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...contract.instances import InstancePrediction
from ..detect.matching import ImageStats
from ..instances.geometry import InstanceSample
from ..instances.matching import match_similarity

MAX_DET = 100
"""COCO's ``maxDets`` for masks (per image and class)."""
CHUNK = 16
"""Predicted masks resized at once (bounds the memory of a 640-pixel validation)."""


def mask_iou(pred: Tensor, gt: Tensor) -> np.ndarray:
    """IoU of ``bool [N, ...]`` masks against ``bool [M, ...]`` of the same size -> ``float64 [N, M]``
    (0 where both are empty, as pycocotools). The pixel counts come from a float32 product, exact
    while a mask has fewer than 2**24 pixels (a 4096 x 4096 input), at half float64's cost."""
    p = pred.reshape(len(pred), -1)
    g = gt.reshape(len(gt), -1)
    if p.shape[1] >= 2**24:
        p, g = p.double(), g.double()
    else:
        p, g = p.float(), g.float()
    inter = (p @ g.T).double()
    union = p.sum(1).double()[:, None] + g.sum(1).double()[None, :] - inter
    return torch.where(union > 0, inter / union.clamp(min=1), torch.zeros_like(inter)).cpu().numpy()


def score_masks(prediction: InstancePrediction, sample: InstanceSample, *, max_det: int = MAX_DET) -> ImageStats:
    """One image's mask ``ImageStats`` (see the module docstring)."""
    det = prediction.det.float().cpu()
    if sample.masks is None or prediction.masks is None:
        raise ValueError("score_masks needs predicted and ground-truth masks (a segment model on segment data)")
    x0, y0, x1, y1 = sample.region
    size = sample.masks.shape[-1]
    device = prediction.masks.device
    gt = sample.masks[:, y0:y1, x0:x1].to(device)
    sim = np.zeros((len(det), len(gt)))
    wanted = _candidates(det, sample.classes, max_det)
    for lo in range(0, len(wanted), CHUNK):
        rows = wanted[lo:lo + CHUNK]
        logits = prediction.masks[rows.to(device)][:, None].float()
        full = F.interpolate(logits, size=(size, size), mode="bilinear", align_corners=False)[:, 0]
        sim[rows.numpy()] = mask_iou(full[:, y0:y1, x0:x1] > 0, gt)
    return match_similarity(sim, det[:, 4], det[:, 5].long(), sample.classes, max_det=max_det, image_id=sample.index)


def _candidates(det: Tensor, gt_cls: Tensor, max_det: int) -> Tensor:
    """Rows of ``det`` whose IoU can matter: of a class present in the ground truth, and among the
    ``max_det`` best of their class."""
    keep = []
    for c in torch.unique(gt_cls).tolist():
        rows = (det[:, 5] == c).nonzero()[:, 0]
        order = torch.argsort(-det[rows, 4], stable=True)
        keep.append(rows[order[:max_det]])
    return torch.cat(keep) if keep else torch.zeros(0, dtype=torch.int64)
