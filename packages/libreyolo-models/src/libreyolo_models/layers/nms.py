"""Confidence filtering and class-aware NMS for dense detectors (eager only, never graphed)."""

from __future__ import annotations

import torch
from torch import Tensor

from .nms_kernel import batched_nms, nms

# Candidates kept (by score) before NMS: an untrained or early model scores every anchor about
# equally, and NMS over all of them would stall validation. Ranks then all finish in bounded time.
MAX_NMS_CANDIDATES = 30_000


def nms_per_image(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                  classes: list[int] | None = None, agnostic: bool = False,
                  max_candidates: int = MAX_NMS_CANDIDATES) -> list[Tensor]:
    """Detections for each image of a batch.

    The score threshold runs on fixed shapes for the whole batch, and every candidate row
    (box, score, class) of all images is taken out in one gather; NMS then runs per image (a
    class-aware ``batched_nms`` over that image's candidates). One NMS over the whole batch would
    cost ``(B * n)^2`` instead of ``B * n^2``: at batch 32 with every anchor a candidate (an
    untrained model) that is a 9 GB suppression mask and 30x the time. Only an image with more
    than ``max_candidates`` candidates pays for a top-k (a full sort of its anchors); at batch 1
    with a trained model that never happens. The host waits on the device once for the
    candidate counts (then the gather's ``nonzero`` finds the device idle) and once per image
    inside NMS; the detections stay on the device, one tensor per image.

    Args:
        predictions: ``[B, 4 + nc, A]``: xyxy boxes in input pixels, then per-class scores in [0, 1].
        conf: keep candidates whose best class score is above this.
        iou: NMS IoU threshold; boxes of different classes never suppress each other, unless
            ``agnostic``.
        max_det: detections kept per image, best first.
        classes: keep only these class ids (applied before NMS).
        max_candidates: top-scoring candidates considered per image before NMS.

    Returns:
        Per image, ``float [N, 6]``: x1, y1, x2, y2, score, class id; sorted by score.
    """
    return [rows for rows, _ in nms_with_anchors(predictions, conf=conf, iou=iou, max_det=max_det, classes=classes,
                                                 agnostic=agnostic, max_candidates=max_candidates)]


def nms_with_anchors(predictions: Tensor, *, conf: float, iou: float, max_det: int,
                     classes: list[int] | None = None, agnostic: bool = False,
                     max_candidates: int = MAX_NMS_CANDIDATES) -> list[tuple[Tensor, Tensor]]:
    """``nms_per_image`` (see there), each image's detections with the anchor each came from
    (``int64 [N]``, columns of ``predictions``): what a head's other per-anchor outputs (a pose
    model's keypoints) are gathered by."""
    batch, anchors = predictions.shape[0], predictions.shape[2]
    scores, cls = predictions[:, 4:].max(1)                      # [B, A]
    keep = scores > conf
    if classes is not None:
        keep &= torch.isin(cls, torch.as_tensor(classes, device=cls.device))
    per_image = keep.sum(1) if batch > 1 else None
    flat = keep.reshape(-1).nonzero().squeeze(1)                 # the wait before NMS
    counts = [flat.numel()] if per_image is None else per_image.tolist()  # the device is idle by now
    if max(counts) > max_candidates:                             # an untrained model: cut by score
        ranked = scores.masked_fill(~keep, float("-inf"))
        cut = ranked.topk(min(max_candidates, anchors), dim=1).indices
        keep = torch.zeros_like(keep).scatter_(1, cut, True) & keep
        flat = keep.reshape(-1).nonzero().squeeze(1)
        counts = [min(n, max_candidates) for n in counts]
    # Rows [B, A, 6] = box, score, class; the kept ones, image-major, in one gather.
    rows = torch.cat((predictions[:, :4].transpose(1, 2), scores[..., None], cls[..., None].to(scores.dtype)), 2)
    picked = rows.reshape(batch * anchors, 6)[flat].float()
    out: list[tuple[Tensor, Tensor]] = []
    for image_rows, image_flat in zip(picked.split(counts), (flat % anchors).split(counts)):
        if image_rows.shape[0] == 0:
            out.append((image_rows, image_flat))
            continue
        # float64 for the class offsets batched_nms adds: float32 would round shifted coordinates
        # (80 classes x 640 px) by ~0.004 px and could flip a borderline suppression.
        boxes, score = image_rows[:, :4].double(), image_rows[:, 4].double()
        if agnostic:
            kept = nms(boxes, score, iou)
        else:
            kept = batched_nms(boxes, score, image_rows[:, 5], iou)
        out.append((image_rows[kept[:max_det]], image_flat[kept[:max_det]]))
    return out


def scale_to_original(det: Tensor, ratio: float, pad: tuple[float, float], orig_shape: tuple[int, int]) -> Tensor:
    """Map ``[N, 6]`` detections from letterboxed input pixels back to the original image."""
    det = det.clone()
    xyxy = det[:, :4]
    h, w = orig_shape
    xyxy.sub_(xyxy.new_tensor((pad[0], pad[1], pad[0], pad[1]))).div_(ratio)
    xyxy.clamp_(xyxy.new_zeros(4), xyxy.new_tensor((w, h, w, h)))
    return det
