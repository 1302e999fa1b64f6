"""FOMO's post-processing: heatmap peaks -> centroids with class and score (eager).

Each cell belongs to its most probable object class (one class per cell, as FOMO's softmax
decides: a cell is not two objects), scored by that class's probability. A cell is a detection
when its score is at least ``conf`` and the largest in its 3x3 neighbourhood, whatever the
neighbours' classes (a peak); its point is the mean of the 3x3 neighbourhood's cell centres
weighted by the detected class's probability (sub-cell precision when an object straddles
cells). Peaks about a cell apart (ties of a flat top: true peaks are two or more cells apart) are
merged, the higher score kept (``torchvision.ops.nms`` on squares two cells wide).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import nms

MERGE_IOU = 0.1  # two-cell squares overlap by 1/3 one cell apart, 1/7 diagonally or 1.5 cells apart, 0 at 2


def decode_points(probs: Tensor, *, conf: float, max_det: int, stride: int,
                  classes: Sequence[int] | None = None) -> list[Tensor]:
    """Per image ``float32 [N, 4]`` rows (x, y in input pixels, class, score), best score first.

    Args:
        probs: ``[B, nc + 1, h, w]`` per-cell probabilities, channel 0 the background.
        conf: the smallest score kept; max_det: points kept per image (the best).
        stride: input pixels per cell side; classes: keep only these class ids (None: all).
    """
    obj = probs[:, 1:].float()
    b, nc, h, w = obj.shape
    if classes is not None:
        wanted = torch.zeros(nc, dtype=torch.bool, device=obj.device)
        wanted[[c for c in classes if 0 <= c < nc]] = True
        obj = obj * wanted.view(1, nc, 1, 1)
    score, best = obj.max(1)                                                   # [B, h, w]
    peaks = (score == F.max_pool2d(score[:, None], 3, stride=1, padding=1)[:, 0]) & (score >= conf)
    picked = torch.zeros_like(obj).scatter_(1, best[:, None], 1.0)  # one-hot: each cell's own class
    ys = (torch.arange(h, device=obj.device, dtype=torch.float32) + 0.5).view(1, 1, h, 1)
    xs = (torch.arange(w, device=obj.device, dtype=torch.float32) + 0.5).view(1, 1, 1, w)
    mass = F.avg_pool2d(obj, 3, stride=1, padding=1)
    cx = (F.avg_pool2d(obj * xs, 3, stride=1, padding=1) / mass.clamp(min=1e-12) * picked).sum(1)
    cy = (F.avg_pool2d(obj * ys, 3, stride=1, padding=1) / mass.clamp(min=1e-12) * picked).sum(1)
    out = []
    for i in range(b):
        row, col = peaks[i].nonzero(as_tuple=True)
        s, cls = score[i, row, col], best[i, row, col]
        x, y = cx[i, row, col] * stride, cy[i, row, col] * stride
        half = torch.full_like(x, float(stride))
        keep = nms(torch.stack((x - half, y - half, x + half, y + half), dim=1), s, MERGE_IOU)[:max_det]
        out.append(torch.stack((x[keep], y[keep], cls[keep].float(), s[keep]), dim=1))
    return out
