"""What a detection validation writes besides its numbers: the confusion matrix (counts and
normalised), P / R / F1 / PR curves per class, ``predictions.json`` (COCO results format), and
the first batches as pictures (``val_batch0_labels.jpg`` with the ground truth,
``val_batch0_pred.jpg`` with the predictions scoring 0.25 or more; batches 0-2, rank 0).

The validator feeds every image to ``DetectArtefacts.update`` on each rank; ``finish`` gathers the
small per-rank parts (a matrix, the JSON rows) to rank 0, which writes the files. Nothing here
changes the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

import libreyolo_ddp

from ...layers.nms import scale_to_original
from ..curves import all_class_curves
from ..plots import plot_batch, plot_confusion, plot_curves
from .coco_results import coco_detections, write_json
from .confusion import ConfusionMatrix
from .metrics import DetectionMetrics
from .pictures import plot_predictions

log = logging.getLogger(__name__)

BATCH_PICTURES = 3   # val_batch0..2


class DetectArtefacts:
    """Collects one validation's artefacts; ``plots`` and ``save_json`` say which to write."""

    def __init__(self, nc: int, names: Mapping[int, str], save_dir: Path, *, plots: bool = True,
                 save_json: bool = False) -> None:
        self.names, self.save_dir, self.plots, self.save_json = dict(names), Path(save_dir), plots, save_json
        self.confusion = ConfusionMatrix(nc)
        self.json_rows: list[dict[str, object]] = []

    def update(self, det: Tensor, gt_boxes: Tensor, gt_cls: Tensor, *, path: str,
               ratio_pad: tuple[float, tuple[Any, Any]] | None, orig_shape: tuple[int, int]) -> None:
        """One image: ``det [N, 6]`` and ``gt_boxes [M, 4]`` in network-input pixels."""
        if self.plots:
            self.confusion.update(det, gt_boxes, gt_cls)
        if self.save_json:
            ratio, pad = ratio_pad if ratio_pad is not None else (1.0, (0, 0))
            original = scale_to_original(det.float().cpu(), ratio, (float(pad[0]), float(pad[1])), orig_shape)
            self.json_rows.extend(coco_detections(original, path))

    def batch_pictures(self, number: int, images: Tensor, targets: Tensor, detections: list[Tensor],
                       paths: list[str]) -> None:
        """Draw batch ``number`` (the first ``BATCH_PICTURES``, on rank 0, with ``plots``): labels and predictions."""
        if not self.plots or number >= BATCH_PICTURES or libreyolo_ddp.dist_env().rank != 0:
            return
        for name, draw in (("labels", lambda p: plot_batch(images, targets, self.names, p)),
                           ("pred", lambda p: plot_predictions(images, detections, self.names, p))):
            path = self.save_dir / f"val_batch{number}_{name}.jpg"
            try:
                draw(path)
            except Exception as err:  # noqa: BLE001 - a picture is never worth a validation
                log.warning("could not draw %s: %s: %s", path.name, type(err).__name__, err)

    def finish(self, metrics: DetectionMetrics | None) -> list[Path]:
        """Gather to rank 0 and write the files there (``metrics``: the merged metrics on rank 0,
        from which the curves are drawn). Every rank must call it; other ranks get ``[]``."""
        env = libreyolo_ddp.dist_env()
        if env.world_size > 1:
            parts = libreyolo_ddp.gather_to_rank_zero((self.confusion.matrix, self.json_rows))
            if env.rank != 0:
                return []
            self.confusion.matrix[:] = 0
            self.json_rows = []
            for matrix, rows in parts or []:
                self.confusion.merge(matrix)
                self.json_rows.extend(rows)
        written: list[Path] = []
        if self.plots:
            written.append(plot_confusion(self.confusion.matrix, self.names, self.save_dir / "confusion_matrix.png",
                                          normalize=False))
            written.append(plot_confusion(self.confusion.matrix, self.names,
                                          self.save_dir / "confusion_matrix_normalized.png", normalize=True))
            if metrics is not None:
                written += plot_curves(all_class_curves(metrics.class_curves()), self.names, self.save_dir)
        if self.save_json:
            written.append(write_json(self.json_rows, self.save_dir / "predictions.json"))
        log.info("validation artefacts written to %s", self.save_dir)
        return written
