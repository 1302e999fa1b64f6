"""Object detection: YOLO-format (or COCO JSON) boxes, mAP, ``Results.boxes``.

Targets: ``float32 [M, 6]`` rows (image index in the batch, class, cx, cy, w, h), boxes
normalised to the network input, on the CPU. Family ``postprocess`` returns, per image,
``float [N, 6]`` (x1, y1, x2, y2 in input pixels, score, class id).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...data.augment_draws import AugmentConfig
from ...data.letterbox_images import letterbox
from ...layers.nms import scale_to_original
from ..base import Batch, EvalSettings, Prepared, Task, TaskMetrics, TrainOptions
from ..bundled_sets import refuse_foreign_bundle
from ..loss_meter import LossMeter
from ..results import Results
from . import render_graph
from .artefacts import DetectArtefacts
from .boxes import Boxes
from .datasets import load_split, resolve_dataset
from .pipeline import TrainPipeline, ValPipeline
from .rect import RectTrainPipeline, RectValPipeline
from .validator import evaluate_detections

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView


@dataclass(frozen=True)
class DetectOptions:
    """Post-processing of dense detectors: score threshold, NMS IoU, cap, class filter."""

    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    classes: list[int] | None = None
    agnostic: bool = False


def detect_options(options: Mapping[str, Any]) -> DetectOptions:
    """Predict's thresholds for any task whose objects have boxes (conf, iou, max_det, classes,
    agnostic_nms): detect, and the instance tasks."""
    return DetectOptions(conf=options.get("conf", 0.25), iou=options.get("iou", 0.45),
                         max_det=options.get("max_det", 300), classes=options.get("classes"),
                         agnostic=bool(options.get("agnostic_nms", False)))


def letterbox_prepared(image: np.ndarray, imgsz: int) -> Prepared:
    """One picture letterboxed to ``imgsz`` (predict's preprocessing for the box tasks)."""
    tensor, info = letterbox(image, imgsz)
    return Prepared(tensor, info)


class DetectTask(Task):
    name: ClassVar[str] = "detect"
    fitness_name: ClassVar[str] = "0.1*mAP50 + 0.9*mAP50-95"
    results_field: ClassVar[str] = "boxes"
    supports_multi_scale: ClassVar[bool] = True
    images_on_device: ClassVar[bool] = True
    rendering_bytes_per_pixel: ClassVar[int] = render_graph.BYTES_PER_PIXEL
    augmentations: ClassVar[frozenset[str]] = frozenset(AugmentConfig.__dataclass_fields__)
    supports_rect: ClassVar[bool] = True
    supports_single_cls: ClassVar[bool] = True
    val_artefacts: ClassVar[frozenset[str]] = frozenset({"plots", "save_json"})
    validation_losses: ClassVar[bool] = True

    def load_data(self, data: Any) -> Any:
        refuse_foreign_bundle(data, self.name)
        return resolve_dataset(data)

    def load_split(self, data: Any, split: str) -> Any:
        return load_split(data, split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int, rect: int | None = None) -> TrainPipeline | RectTrainPipeline:
        """Augmented batches; ``rect``: the network's stride, for rectangular batches (``tasks.detect.rect``)."""
        if rect:
            return RectTrainPipeline(index, imgsz=imgsz, stride=rect, batch_size=batch_size, device=device,
                                     workers=workers, seed=cfg.seed, fliplr=cfg.augment().fliplr, cache=cfg.cache)
        return TrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, augment=cfg.augment(),
                             workers=workers, seed=cfg.seed, gpu_augment=cfg.gpu_augment, cache=cfg.cache)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting, rect: int | None = None) -> ValPipeline | RectValPipeline:
        if rect:
            return RectValPipeline(index, imgsz=imgsz, stride=rect, batch_size=batch_size, device=device,
                                   workers=workers, cache=cache)
        return ValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, workers=workers,
                           cache=cache)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        options = DetectOptions(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)
        artefacts = None
        if settings.save_dir is not None and (settings.plots or settings.save_json):
            artefacts = DetectArtefacts(model.nc, model.names, settings.save_dir, plots=settings.plots,
                                        save_json=settings.save_json)
        losses = LossMeter(settings.loss, settings.loss_names) if settings.loss is not None else None
        return evaluate_detections(model, forward, pipeline, options=options, half=settings.half,
                                   progress=progress, artefacts=artefacts, losses=losses)

    def empty_best(self) -> dict[str, float]:
        return {"mAP50": 0.0, "mAP50_95": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> DetectOptions:
        return detect_options(options)

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        return letterbox_prepared(image, imgsz)

    def predictions_to_host(self, predictions: Any) -> Any:
        """Every image's ``[N, 6]`` detections in one device-to-host copy (one sync per batch)."""
        if not predictions or predictions[0].device.type == "cpu":
            return predictions
        if len(predictions) == 1:  # batch 1: no concatenation kernel
            return [predictions[0].cpu()]
        sizes = [len(p) for p in predictions]
        return list(torch.cat(predictions).cpu().split(sizes))

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        det = scale_to_original(prediction, info.ratio, info.pad, info.orig_shape).cpu()
        return Results(image, name, names, boxes=Boxes(det, info.orig_shape), speed=speed)
