"""Post-processing of a set predictor (DETR family): the best (query, class) pairs, no NMS (eager).

A set predictor learns not to duplicate objects (one-to-one matching punishes a second box on the
same object), so there is nothing for NMS to remove. Every (query, class) score competes in one
top-k, so a query may report a second class when that score still ranks among the best.
"""

from __future__ import annotations

import torch
from torch import Tensor


def cxcywh_to_pixel_xyxy(boxes: Tensor, height: int, width: int) -> Tensor:
    """``[..., 4]`` cx, cy, w, h normalised to the input -> x1, y1, x2, y2 in input pixels."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack(((cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height), -1)


def xy_to_pixels(xy: Tensor, height: int, width: int) -> Tensor:
    """``[..., 2]`` x, y normalised to the input -> input pixels. Multiplied by Python numbers: a
    tensor built from them would be a host-to-device copy, which a CUDA graph capture refuses."""
    return torch.stack((xy[..., 0] * width, xy[..., 1] * height), -1)


def topk_detections(predictions: Tensor, *, conf: float, max_det: int,
                    classes: list[int] | None = None) -> list[Tensor]:
    """``[B, Q, 4 + nc]`` (xyxy input pixels, sigmoid scores) -> per image ``float [N, 6]``
    detections (x1, y1, x2, y2, score, class id), best first, ``N <= max_det``, every score above
    ``conf``; ``classes`` keeps only those class ids."""
    return [det for det, _ in topk_queries(predictions, conf=conf, max_det=max_det, classes=classes)]


def topk_queries(predictions: Tensor, *, conf: float, max_det: int,
                 classes: list[int] | None = None) -> list[tuple[Tensor, Tensor]]:
    """:func:`topk_detections` plus, per detection, the query it came from (``int64 [N]``): an
    instance task reads that query's mask or keypoints."""
    out = []
    nc = predictions.shape[-1] - 4
    for pred in predictions.float():
        scores = pred[:, 4:]
        if classes is not None:
            keep = torch.zeros(nc, dtype=torch.bool, device=scores.device)
            keep[torch.as_tensor(classes, device=scores.device, dtype=torch.long)] = True
            scores = scores.masked_fill(~keep, 0.0)
        top = scores.flatten().topk(min(max_det, scores.numel()))
        query, cls = top.indices // nc, top.indices % nc
        det = torch.cat((pred[query, :4], top.values[:, None], cls[:, None].float()), 1)
        above = top.values > conf
        out.append((det[above], query[above]))
    return out
