"""Semantic segmentation: images plus single-channel PNG masks, mIoU, ``Results.masks``.

Data: a data.yaml like detection's (``path``, ``train``, ``val``, ``names``; optional
``masks_dir``) whose masks sit in ``masks/`` beside ``images/`` with the same stems (see
``tasks.semantic.mask_files``), or the bundled ``"shapes-seg"``. Targets: ``uint8 [B, S, S]`` class ids on the
device, 255 where unlabelled. Family ``inference_forward`` returns ``int64 [B, S, S]`` class maps
at the input resolution; ``postprocess`` splits them per image; ``Results.masks`` holds each one
carried back to its original image. Fitness is mIoU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

import libreyolo_ddp

from ...data.augment_draws import AugmentConfig
from ...data.data_config import DataConfig, load_data_config
from ...data.errors import DataConfigError
from ...data.letterbox_images import letterbox
from ...errors import ConfigError
from ..base import Batch, EvalSettings, Prepared, Task, TaskMetrics, TrainOptions
from ..bundled_sets import resolve_bundled
from ..plots import plot_confusion
from ..results import Results
from .augment import SEMANTIC_AUGMENTATIONS
from .class_map import SemanticMask, map_to_original
from .mask_files import IGNORE_INDEX
from .pipeline import MaskTrainPipeline, MaskValPipeline
from .reader import MaskSplit, read_mask_split
from .shapes_seg import BUNDLED_NAMES, ensure_shapes_seg
from .validator import evaluate_semantic

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

log = logging.getLogger(__name__)



class SemanticTask(Task):
    name: ClassVar[str] = "semantic"
    fitness_name: ClassVar[str] = "mIoU"
    results_field: ClassVar[str] = "masks"
    supports_multi_scale: ClassVar[bool] = False
    augmentations: ClassVar[frozenset[str]] = SEMANTIC_AUGMENTATIONS
    val_artefacts: ClassVar[frozenset[str]] = frozenset({"plots"})  # the confusion matrix

    def load_data(self, data: Any) -> DataConfig:
        """A data.yaml path, a folder holding one, a dict, or the bundled ``"shapes-seg"``."""
        data = resolve_bundled(data, self.name, BUNDLED_NAMES, ensure_shapes_seg)
        config = load_data_config(data)
        if config.nc >= IGNORE_INDEX:
            raise DataConfigError(f"{config.source}: {config.nc} classes; semantic masks hold ids 0..254 and "
                                  f"{IGNORE_INDEX} for unlabelled pixels, so at most {IGNORE_INDEX} classes")
        return config

    def load_split(self, data: Any, split: str) -> MaskSplit:
        return read_mask_split(self.load_data(data), split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> MaskTrainPipeline:
        augment = cfg.augment()
        unused = [f"{name}={getattr(augment, name):g}" for name in sorted(AugmentConfig.__dataclass_fields__)
                  if name not in self.augmentations and getattr(augment, name) != 0]
        if unused:
            log.warning("%s: no effect on semantic training, which augments with scale, fliplr and hsv_h/s/v only",
                        ", ".join(unused))
        return MaskTrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, augment=augment,
                                 workers=workers, seed=cfg.seed, gpu_augment=cfg.gpu_augment, cache=cfg.cache)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> MaskValPipeline:
        return MaskValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, workers=workers)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        result = evaluate_semantic(model, forward, pipeline, half=settings.half, progress=progress)
        if settings.save_dir is not None and settings.plots and libreyolo_ddp.dist_env().rank == 0:
            for normalize, name in ((False, "confusion_matrix.png"), (True, "confusion_matrix_normalized.png")):
                plot_confusion(result.confusion.cpu().numpy(), model.names, settings.save_dir / name,
                               normalize=normalize, background=False)
        return result

    def empty_best(self) -> dict[str, float]:
        return {"mIoU": 0.0, "pixel_accuracy": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> None:
        """Class maps need no thresholds: conf, iou and max_det do not apply. ``classes`` would
        silently do nothing (every pixel gets a class), so it is refused."""
        if options.get("classes") is not None:
            raise ConfigError(f"classes={options['classes']} filters detections; a semantic model labels every "
                              "pixel, so there is nothing to filter. Select classes from Results.masks.data instead")
        return None

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        tensor, info = letterbox(image, imgsz)
        return Prepared(tensor, info)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        return Results(image, name, names, speed=speed, masks=SemanticMask(map_to_original(prediction, info).cpu()))
