"""Image classification: ImageFolder data, top-1/top-5 accuracy, ``Results.probs``.

Targets: training batches carry soft targets ``float32 [B, nc]`` on the device (one-hot, or
mixed by mixup/CutMix, then label-smoothed); validation batches carry class ids ``int64 [B]``.
The family's seams return logits ``float [B, nc]``; its ``postprocess`` returns per image the
softmax probabilities ``float [nc]``. Evaluation preprocessing (validation and predict alike):
short side to ``imgsz / 0.875``, centre crop ``imgsz`` (``tasks.classify.ops.centre_crop``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

import libreyolo_ddp

from ...data.cache_store import CacheSetting
from ..base import Batch, EvalSettings, Prepared, Task, TaskMetrics, TrainOptions
from ..bundled_sets import refuse_foreign_bundle
from ..results import Results
from .augment import ClassifyAugment
from .folder_config import load_folder_data
from .folder_reader import load_class_split
from .metrics import evaluate_classification, write_confusion_plots
from .ops import centre_crop
from .pipeline import ClassifyTrainPipeline, ClassifyValPipeline
from .probs import Probs

if TYPE_CHECKING:
    from ..base import ModelView


@dataclass(frozen=True)
class ClassifyOptions:
    """Post-processing of classifiers: none beyond the softmax (kept for the protocol's shape)."""


class ClassifyTask(Task):
    name: ClassVar[str] = "classify"
    fitness_name: ClassVar[str] = "top1 accuracy"
    results_field: ClassVar[str] = "probs"
    supports_multi_scale: ClassVar[bool] = False
    augmentations: ClassVar[frozenset[str]] = frozenset(ClassifyAugment.__dataclass_fields__) | {"label_smoothing"}
    reduced_decode: ClassVar[bool] = False  # the centre crop is taken from the full picture
    val_artefacts: ClassVar[frozenset[str]] = frozenset({"plots"})  # the confusion matrix

    def load_data(self, data: Any) -> Any:
        refuse_foreign_bundle(data, self.name)
        return load_folder_data(data)

    def load_split(self, data: Any, split: str) -> Any:
        return load_class_split(data, split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> ClassifyTrainPipeline:
        return ClassifyTrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device,
                                     augment=cfg.classify_augment(), workers=workers, seed=cfg.seed,
                                     gpu_augment=cfg.gpu_augment, cache=cfg.cache,
                                     label_smoothing=cfg.label_smoothing)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> ClassifyValPipeline:
        return ClassifyValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, workers=workers,
                                   cache=cache)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        result = evaluate_classification(model, forward, pipeline, half=settings.half, progress=progress)
        if settings.plots and settings.save_dir is not None and libreyolo_ddp.is_rank_zero():
            write_confusion_plots(result.confusion, model.names, Path(settings.save_dir))
        return result

    def empty_best(self) -> dict[str, float]:
        return {"top1": 0.0, "top5": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> ClassifyOptions:
        return ClassifyOptions()

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        crop = torch.from_numpy(centre_crop(image, imgsz)).permute(2, 0, 1).float().div_(255)
        return Prepared(crop, None)

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """The centre crop on the CPU (the pixels validation caches), then one upload of the batch."""
        crops = torch.stack([self.prepare(image.numpy(), imgsz).tensor for image in images])
        return crops.to(device=device, dtype=dtype, non_blocking=True), [None] * len(images)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        return Results(image, name, names, probs=Probs(prediction.float().cpu(), names), speed=speed)
