"""Pose estimation: objects with boxes and keypoints, OKS mAP, ``Results.keypoints``.

Data: a data.yaml with ``kpt_shape`` (and ``flip_idx``, ``oks_sigmas``) over YOLO keypoint labels
or COCO keypoints JSON (``tasks.pose.reader``), or the bundled ``"shapes-pose"``. Targets:
``contract.instances.InstanceTargets`` with ``keypoints`` normalised and the dataset's ``sigmas``.
Family ``postprocess`` returns one ``InstancePrediction`` per image (boxes and keypoints in input
pixels); ``Results`` holds the boxes and ``Results.keypoints`` (``keypoints.Keypoints``) in
original pixels. Fitness: ``0.1 * mAP50 + 0.9 * mAP50-95`` of OKS. The OKS sigmas the validation
uses are those of the data it validates on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...contract.instances import InstancePrediction
from ...layers.nms import scale_to_original
from ..base import Batch, EvalSettings, TaskMetrics, TrainOptions
from ..detect.boxes import Boxes
from ..detect.task import DetectOptions
from ..instances.pipeline import InstanceKind, InstanceTrainPipeline, InstanceValPipeline
from ..instances.split import InstanceSplit
from ..instances.task import InstanceTask
from ..instances.validator import evaluate_instances
from ..loss_meter import LossMeter
from ..results import Results
from .keypoints import Keypoints
from .reader import PoseConfig, load_pose_config, read_pose_split
from .scoring import score_keypoints
from .shapes_pose import BUNDLED_NAMES, ensure_shapes_pose

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

log = logging.getLogger(__name__)

def pose_kind(config: PoseConfig) -> InstanceKind:
    """What a pose split's batches carry: keypoints, the flip map (identity without one: flips are
    then turned off by the pipeline's caller) and the OKS sigmas."""
    return InstanceKind(keypoints=True, flip_idx=config.flip_idx or tuple(range(config.keypoints)),
                        sigmas=config.sigmas)


class PoseTask(InstanceTask):
    name: ClassVar[str] = "pose"
    fitness_name: ClassVar[str] = "0.1*mAP50(P) + 0.9*mAP50-95(P)"
    results_field: ClassVar[str] = "keypoints"
    carries: ClassVar[str] = "keypoints"
    bundled_names: ClassVar[tuple[str, ...]] = BUNDLED_NAMES

    def ensure_bundled(self) -> Path:
        return ensure_shapes_pose()

    def read_config(self, data: Any) -> PoseConfig:
        return load_pose_config(data)

    def load_split(self, data: Any, split: str) -> Any:
        config = self.checked_config(data, split)
        split_data = read_pose_split(config, split)
        return PoseSplit(**{f.name: getattr(split_data, f.name) for f in fields(InstanceSplit)}, config=config)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> InstanceTrainPipeline:
        split, config = _unwrap(index)
        augment = cfg.augment()
        if config.flip_idx is None and augment.fliplr > 0:
            log.warning("%s has no flip_idx, so pose training does not mirror images (fliplr=%g ignored): a mirrored "
                        "left keypoint would keep its left label; add flip_idx to the data.yaml", config.source,
                        augment.fliplr)
            augment = replace(augment, fliplr=0.0)
        return InstanceTrainPipeline(split, imgsz=imgsz, batch_size=batch_size, device=device, augment=augment,
                                     kind=pose_kind(config), workers=workers, seed=cfg.seed, cache=cfg.cache)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> InstanceValPipeline:
        split, config = _unwrap(index)
        return InstanceValPipeline(split, imgsz=imgsz, batch_size=batch_size, device=device, kind=pose_kind(config),
                                   workers=workers, cache=cache)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        options = DetectOptions(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)
        sigmas = getattr(getattr(pipeline, "kind", None), "sigmas", None)
        if sigmas is None:
            raise TypeError("pose evaluation reads its OKS sigmas from the validation pipeline (PoseTask.val_pipeline)")

        def score(prediction: InstancePrediction, sample: Any) -> Any:
            return score_keypoints(prediction, sample, sigmas)

        losses = LossMeter(settings.loss, settings.loss_names) if settings.loss is not None else None
        return evaluate_instances(model, forward, pipeline, options=options, score=score, tag="P",
                                  half=settings.half, progress=progress, losses=losses,
                                  kind=getattr(pipeline, "kind", None), artefacts=self.artefacts(model, settings))

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        pred: InstancePrediction = prediction
        det = scale_to_original(pred.det.float(), info.ratio, info.pad, info.orig_shape).cpu()
        kp = pred.keypoints.float().cpu() if pred.keypoints is not None else torch.zeros((0, 0, 3))
        pad = torch.tensor(info.pad, dtype=torch.float32)
        kp = torch.cat(((kp[..., :2] - pad) / info.ratio, kp[..., 2:]), -1)
        return Results(image, name, names, boxes=Boxes(det, info.orig_shape), speed=speed,
                       contents={"keypoints": Keypoints(kp, info.orig_shape)})


@dataclass(frozen=True)
class PoseSplit(InstanceSplit):
    """A pose split with the dataset's keypoint layout (what the pipelines need besides the split).
    A dataclass like every split, so what cuts a split (``fraction=``, ``subset``) keeps the layout."""

    config: PoseConfig | None = None


def _unwrap(index: Any) -> tuple[InstanceSplit, PoseConfig]:
    if isinstance(index, PoseSplit) and index.config is not None:
        return index, index.config
    raise TypeError(f"a pose pipeline needs PoseTask.load_split's result, not {type(index).__name__}")
