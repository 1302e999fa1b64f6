"""Instance segmentation: objects with boxes and masks, mask mAP, ``Results.masks``.

Data: a data.yaml like detection's whose labels are YOLO polygons, or COCO JSON splits with
polygon or RLE ``segmentation`` (``tasks.segment.reader``), or the bundled ``"shapes-inst"``.
Targets: ``contract.instances.InstanceTargets`` with ``masks`` at ``1 / 4`` of the input side.
Family ``postprocess`` returns one ``InstancePrediction`` per image (boxes in input pixels, mask
logits); ``Results`` holds the boxes and ``Results.masks`` (``masks.InstanceMasks``) at the
original size. Fitness: ``0.1 * mAP50 + 0.9 * mAP50-95`` of the masks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...contract.instances import MASK_STRIDE, InstancePrediction
from ...data.data_config import DataConfig, load_data_config
from ...layers.nms import scale_to_original
from ..base import Batch, EvalSettings, TaskMetrics, TrainOptions
from ..detect.boxes import Boxes
from ..detect.task import DetectOptions
from ..instances.pipeline import InstanceKind, InstanceTrainPipeline, InstanceValPipeline
from ..instances.task import InstanceTask
from ..instances.validator import evaluate_instances
from ..loss_meter import LossMeter
from ..results import Results
from .masks import InstanceMasks, masks_to_original
from .reader import read_segment_split
from .scoring import score_masks
from .shapes_inst import BUNDLED_NAMES, ensure_shapes_inst

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

SEGMENT = InstanceKind(masks=True)


class SegmentTask(InstanceTask):
    name: ClassVar[str] = "segment"
    fitness_name: ClassVar[str] = "0.1*mAP50(M) + 0.9*mAP50-95(M)"
    results_field: ClassVar[str] = "masks"
    carries: ClassVar[str] = "masks"
    bundled_names: ClassVar[tuple[str, ...]] = BUNDLED_NAMES

    def ensure_bundled(self) -> Path:
        return ensure_shapes_inst()

    def read_config(self, data: Any) -> DataConfig:
        return load_data_config(data)

    def load_split(self, data: Any, split: str) -> Any:
        return read_segment_split(self.checked_config(data, split), split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> InstanceTrainPipeline:
        return InstanceTrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, augment=cfg.augment(),
                                     kind=SEGMENT, workers=workers, seed=cfg.seed, cache=cfg.cache)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> InstanceValPipeline:
        return InstanceValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, kind=SEGMENT,
                                   workers=workers, cache=cache)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        options = DetectOptions(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)
        losses = LossMeter(settings.loss, settings.loss_names) if settings.loss is not None else None
        return evaluate_instances(model, forward, pipeline, options=options, score=score_masks, tag="M",
                                  half=settings.half, progress=progress, losses=losses,
                                  kind=getattr(pipeline, "kind", SEGMENT), artefacts=self.artefacts(model, settings),
                                  score_on_device=True)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        pred: InstancePrediction = prediction
        det = scale_to_original(pred.det.float(), info.ratio, info.pad, info.orig_shape).cpu()
        masks = (masks_to_original(pred.masks, info, int(pred.masks.shape[-1]) * MASK_STRIDE)
                 if pred.masks is not None else torch.zeros((0, *info.orig_shape), dtype=torch.bool))
        return Results(image, name, names, boxes=Boxes(det, info.orig_shape),
                       masks=InstanceMasks(masks, det[:, 5].long().numpy()), speed=speed)

