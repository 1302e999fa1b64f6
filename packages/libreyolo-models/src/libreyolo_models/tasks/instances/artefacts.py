"""What an instance (segment, pose) validation writes besides its numbers: the boxes' confusion
matrix (counts and normalised) with ``plots=True``, and ``predictions.json`` with ``save_json=True``:
COCO results (``bbox``, ``score``, and ``segmentation`` as compressed RLE over the original image,
or ``keypoints`` as ``[x, y, confidence] * K`` in original pixels) that ``pycocotools``'
``COCO.loadRes`` reads for its ``segm`` and ``keypoints`` evaluations.

Each validation picture is letterboxed into the square input; ``InstanceSample.region`` says
where, so predictions map back to the original picture through it (the masks as predict maps them:
logits resized to the input, cut to the picture's region, resized to its size, thresholded at 0).
Rank 0 writes the files after gathering every rank's part. Nothing here changes the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

import libreyolo_ddp

from ...contract.instances import InstancePrediction
from ..detect.artefacts import DetectArtefacts
from ..detect.coco_results import coco_detections, write_json
from ..segment.mask_shapes import RLEMask
from .geometry import InstanceSample

log = logging.getLogger(__name__)


def to_original(xy: Tensor, sample: InstanceSample) -> Tensor:
    """``[..., 2]`` input pixels -> the original picture's pixels, through the sample's region."""
    x0, y0, x1, y1 = sample.region
    h, w = sample.ori_size
    scale = torch.tensor([w / max(x1 - x0, 1), h / max(y1 - y0, 1)], dtype=torch.float32)
    return (xy.float() - torch.tensor([x0, y0], dtype=torch.float32)) * scale


def masks_to_picture(logits: Tensor, sample: InstanceSample, side: int) -> Tensor:
    """``float [N, h, w]`` mask logits over the ``side`` input -> ``bool [N, H, W]`` over the picture."""
    h, w = sample.ori_size
    if logits.shape[0] == 0:
        return torch.zeros((0, h, w), dtype=torch.bool)
    x0, y0, x1, y1 = sample.region
    full = F.interpolate(logits[:, None].float(), size=(side, side), mode="bilinear", align_corners=False)
    inner = full[:, :, y0:y1, x0:x1]
    if inner.shape[-2:] != (h, w):
        inner = F.interpolate(inner, size=(h, w), mode="bilinear", align_corners=False)
    return inner[:, 0] > 0


class InstanceArtefacts:
    """Collects one validation's artefacts; ``plots`` and ``save_json`` say which to write."""

    def __init__(self, nc: int, names: Mapping[int, str], save_dir: Path, *, plots: bool, save_json: bool) -> None:
        self.boxes = DetectArtefacts(nc, names, save_dir, plots=plots, save_json=False)
        self.save_dir, self.plots, self.save_json = Path(save_dir), plots, save_json
        self.rows: list[dict[str, object]] = []

    def update(self, prediction: InstancePrediction, sample: InstanceSample, side: int) -> None:
        """One picture's prediction (on the host, input pixels) and its ground truth."""
        det = prediction.det.float()
        if self.plots:
            self.boxes.confusion.update(det, sample.boxes.float(), sample.classes)
        if not self.save_json:
            return
        h, w = sample.ori_size
        boxes = to_original(det[:, :4].reshape(-1, 2, 2), sample).reshape(-1, 4)
        boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
        boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
        rows = coco_detections(torch.cat([boxes, det[:, 4:6]], dim=1), sample.path)
        if prediction.masks is not None:
            masks = masks_to_picture(prediction.masks, sample, side).numpy()
            for row, mask in zip(rows, masks, strict=True):
                row["segmentation"] = RLEMask.encode(mask).to_coco()
        if prediction.keypoints is not None:
            points = prediction.keypoints.float()
            xy = to_original(points[..., :2], sample)
            for row, kp_xy, conf in zip(rows, xy, points[..., 2], strict=True):
                row["keypoints"] = [round(float(v), 3) for triple in zip(kp_xy[:, 0], kp_xy[:, 1], conf)
                                    for v in triple]
        self.rows.extend(rows)

    def finish(self) -> list[Path]:
        """Gather to rank 0 and write the files there. Every rank must call it; other ranks get ``[]``."""
        env = libreyolo_ddp.dist_env()
        written = self.boxes.finish(None) if self.plots else []  # on every rank: a gather when distributed
        if env.world_size > 1 and self.save_json:
            parts = libreyolo_ddp.gather_to_rank_zero(self.rows)
            self.rows = [row for part in parts or [] for row in part]
        if env.rank != 0:
            return []
        if self.save_json:
            written.append(write_json(self.rows, self.save_dir / "predictions.json"))
            log.info("validation predictions written to %s", self.save_dir / "predictions.json")
        return written
