"""Metrics of an instance task: box mAP and mask (segment) or keypoint (pose) mAP, side by side.

Both are COCO's AP (``tasks.detect.metrics.DetectionMetrics`` over ``ImageStats``), the second
from the task's own similarity (mask IoU, OKS) through ``matching.match_similarity``. "Best" is
the task's own mAP: ``0.1 * mAP50 + 0.9 * mAP50-95`` of masks or keypoints. ``results.csv`` gets
Ultralytics' column names: ``metrics/mAP50(B)`` for boxes, ``(M)`` for masks, ``(P)`` for pose,
and in training's validation ``val/<term>_loss``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import libreyolo_ddp

from ..detect.matching import ImageStats
from ..detect.metrics import DetectionMetrics, MetricsResult


@dataclass(frozen=True)
class InstanceResult:
    """One validation of an instance task: ``box`` and ``kind`` (mask or pose) results; ``tag`` is
    the kind's column suffix (``M`` or ``P``)."""

    box: MetricsResult
    kind: MetricsResult
    tag: str
    losses: dict[str, float] = field(default_factory=dict)   # val/<term>_loss, when training validates

    @property
    def map50(self) -> float:
        return self.kind.map50

    @property
    def map50_95(self) -> float:
        return self.kind.map50_95

    @property
    def fitness(self) -> float:
        return 0.1 * self.kind.map50 + 0.9 * self.kind.map50_95

    @property
    def n_images(self) -> int:
        return self.kind.n_images

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for tag, res in (("B", self.box), (self.tag, self.kind)):
            out.update({f"metrics/precision({tag})": res.precision, f"metrics/recall({tag})": res.recall,
                        f"metrics/mAP50({tag})": res.map50, f"metrics/mAP50-95({tag})": res.map50_95})
        out.update(self.losses)
        return out

    def best_fields(self) -> dict[str, float]:
        return {"mAP50": self.kind.map50, "mAP50_95": self.kind.map50_95}

    def summary(self) -> str:
        word = {"M": "mask", "P": "pose"}.get(self.tag, self.tag)
        return (f"{word} mAP50 {self.kind.map50:.4f}  mAP50-95 {self.kind.map50_95:.4f}  "
                f"box mAP50 {self.box.map50:.4f}  mAP50-95 {self.box.map50_95:.4f}")

    def table(self) -> str:
        word = {"M": "Mask", "P": "Pose"}.get(self.tag, self.tag)
        return f"Box\n{self.box.table()}\n{word}\n{self.kind.table()}"


class InstanceMetrics:
    """Accumulates per-image ``ImageStats`` of boxes and of the task's kind; ``compute`` gathers
    them to rank 0 when distributed and gives every rank the same result."""

    def __init__(self, nc: int, names: Mapping[int, str], tag: str) -> None:
        self.nc, self.names, self.tag = nc, dict(names), tag
        self.box = DetectionMetrics(nc, names)
        self.kind = DetectionMetrics(nc, names)
        self.merged: tuple[DetectionMetrics, DetectionMetrics] | None = None
        """After ``compute``, on rank 0: every rank's boxes and masks / poses (what curves are drawn from)."""

    def update(self, box: ImageStats, kind: ImageStats) -> None:
        self.box.update(box)
        self.kind.update(kind)

    def compute(self) -> InstanceResult:
        env = libreyolo_ddp.dist_env()
        if env.world_size <= 1:
            self.merged = (self.box, self.kind)
            return InstanceResult(self.box.compute(), self.kind.compute(), self.tag)
        gathered = libreyolo_ddp.gather_to_rank_zero((self.box.image_stats, self.kind.image_stats))
        result = None
        if env.rank == 0:
            box, kind = DetectionMetrics(self.nc, self.names), DetectionMetrics(self.nc, self.names)
            for box_part, kind_part in gathered or []:
                box.merge(box_part)
                kind.merge(kind_part)
            result = InstanceResult(box.compute(), kind.compute(), self.tag)
            self.merged = (box, kind)
        return libreyolo_ddp.broadcast_object(result, src=0)
