"""What an instance (segment, pose) validation writes besides its numbers: with ``plots=True`` the
boxes' confusion matrix (counts and normalised) and the first batches as pictures
(``val_batch0_labels.jpg`` with the ground truth's boxes and masks or skeletons,
``val_batch0_pred.jpg`` with the predictions scoring 0.25 or more; batches 0-2, rank 0) and the
P / R / F1 / PR curves of the boxes and of the masks or poses (``BoxPR_curve.png``,
``MaskPR_curve.png`` / ``PosePR_curve.png``, ...); with
``save_json=True`` ``predictions.json``:
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
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

import libreyolo_ddp

from ...contract.instances import InstancePrediction
from ..curves import all_class_curves
from ..detect.artefacts import DetectArtefacts
from ..detect.coco_results import coco_detections, write_json
from ..detect.metrics import DetectionMetrics
from ..detect.pictures import PREDICTION_CONF
from ..drawing import draw_detections, save_grid
from ..plots import plot_curves
from ..pose.keypoints import Keypoints
from ..segment.mask_shapes import RLEMask
from ..segment.masks import InstanceMasks
from .geometry import InstanceSample

log = logging.getLogger(__name__)

BATCH_PICTURES = 3   # val_batch0..2
MAX_TILES = 16


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


def draw_tile(sample: InstanceSample, det: Tensor, masks: Tensor | None, keypoints: Tensor | None,
              names: dict[int, str], *, scores: bool) -> np.ndarray:
    """The sample's input picture with objects drawn: masks (``bool [N, S, S]``) or skeletons
    (``[N, K, 3]``), then boxes (``det [N, 6]``, input pixels)."""
    tile = sample.image.permute(1, 2, 0).contiguous().numpy()
    if masks is not None and len(masks):
        tile = InstanceMasks(masks, det[:, 5].long()).plot(tile, names, labels=False, conf=False)
    if keypoints is not None and len(keypoints):
        side = int(sample.image.shape[-1])
        tile = Keypoints(keypoints.float(), (side, side)).plot(tile, names, labels=False, conf=False)
    return draw_detections(tile, det, names, conf=scores, line_width=1)


class InstanceArtefacts:
    """Collects one validation's artefacts; ``plots`` and ``save_json`` say which to write."""

    def __init__(self, nc: int, names: Mapping[int, str], save_dir: Path, *, plots: bool, save_json: bool,
                 kind: str = "Mask") -> None:
        self.boxes = DetectArtefacts(nc, names, save_dir, plots=plots, save_json=False)
        self.kind = kind  # the curves' prefix for what each object carries: "Mask" or "Pose"
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

    def batch_pictures(self, number: int, samples: Sequence[InstanceSample],
                       predictions: Sequence[InstancePrediction]) -> None:
        """Draw batch ``number`` (the first ``BATCH_PICTURES``, on rank 0, with ``plots``): labels and predictions."""
        if not self.plots or number >= BATCH_PICTURES or libreyolo_ddp.dist_env().rank != 0 or not samples:
            return
        names = dict(self.boxes.names)
        labels, preds = [], []
        for sample, prediction in zip(samples[:MAX_TILES], predictions[:MAX_TILES], strict=False):
            truth = torch.cat([sample.boxes.float(), torch.ones((len(sample.boxes), 1)),
                               sample.classes.float()[:, None]], dim=1)
            labels.append(draw_tile(sample, truth, sample.masks, sample.keypoints, names, scores=False))
            det = prediction.det.float()
            keep = det[:, 4] >= PREDICTION_CONF
            masks = None
            if prediction.masks is not None and keep.any():
                side = int(sample.image.shape[-1])
                masks = F.interpolate(prediction.masks[keep][:, None].float(), size=(side, side), mode="bilinear",
                                      align_corners=False)[:, 0] > 0
            kps = prediction.keypoints[keep] if prediction.keypoints is not None else None
            preds.append(draw_tile(sample, det[keep], masks, kps, names, scores=True))
        for name, tiles in (("labels", labels), ("pred", preds)):
            path = self.save_dir / f"val_batch{number}_{name}.jpg"
            try:
                save_grid(tiles, path)
            except Exception as err:  # noqa: BLE001 - a picture is never worth a validation
                log.warning("could not draw %s: %s: %s", path.name, type(err).__name__, err)

    def finish(self, merged: tuple[DetectionMetrics, DetectionMetrics] | None = None) -> list[Path]:
        """Gather to rank 0 and write the files there (``merged``: rank 0's boxes and masks / poses
        metrics over every rank, whose curves are drawn). Every rank must call it; others get ``[]``."""
        env = libreyolo_ddp.dist_env()
        written = self.boxes.finish(None) if self.plots else []  # on every rank: a gather when distributed
        if env.world_size > 1 and self.save_json:
            parts = libreyolo_ddp.gather_to_rank_zero(self.rows)
            self.rows = [row for part in parts or [] for row in part]
        if env.rank != 0:
            return []
        if self.plots and merged is not None:
            names = dict(self.boxes.names)
            for prefix, metrics in zip(("Box", self.kind), merged, strict=True):
                written += plot_curves(all_class_curves(metrics.class_curves()), names, self.save_dir, prefix=prefix)
        if self.save_json:
            written.append(write_json(self.rows, self.save_dir / "predictions.json"))
            log.info("validation predictions written to %s", self.save_dir / "predictions.json")
        return written
