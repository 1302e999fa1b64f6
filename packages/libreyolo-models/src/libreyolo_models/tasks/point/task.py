"""Point detection: object centroids from YOLO label files (points or box centres), P / R / F1 of
matched centroids, ``Results.points``.

Data: a detection data.yaml whose label rows are ``class x y`` points or ``class cx cy w h``
boxes (their centres), the bundled ``"shapes-point"``, or ``"shapes"`` itself. Targets:
``float32 [M, 4]`` rows (image index, class, x, y), points normalised to the network input, on
the CPU. Family ``postprocess`` returns, per image, ``float [N, 4]`` rows (x, y in input pixels,
class id, score), at most ``max_det``, scores at least ``conf``. Fitness is F1 (``tasks.point.metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...data.data_config import DataConfig, load_data_config
from ...data.letterbox_images import letterbox
from ..base import Batch, EvalSettings, Prepared, Task, TaskMetrics, TrainOptions
from ..bundled_sets import resolve_bundled
from ..results import Results
from .pipeline import PointTrainPipeline, PointValPipeline
from .points import Points
from .points_geometry import points_to_original
from .reader import PointSplit, read_point_split
from .shapes_point import BUNDLED_NAMES, ensure_shapes_point
from .validator import evaluate_points

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

log = logging.getLogger(__name__)

POINT_AUGMENTATIONS = frozenset({"degrees", "translate", "scale", "shear", "hsv_h", "hsv_s", "hsv_v", "fliplr"})


@dataclass(frozen=True)
class PointOptions:
    """Post-processing of point models: score threshold, cap per image, class filter."""

    conf: float = 0.25
    max_det: int = 300
    classes: list[int] | None = None


class PointTask(Task):
    name: ClassVar[str] = "point"
    fitness_name: ClassVar[str] = "F1"
    results_field: ClassVar[str] = "points"
    augmentations: ClassVar[frozenset[str]] = POINT_AUGMENTATIONS

    def load_data(self, data: Any) -> DataConfig:
        """A data.yaml path, a folder holding one, a dict, ``"shapes-point"`` or ``"shapes"``."""
        data = resolve_bundled(data, self.name, BUNDLED_NAMES, ensure_shapes_point, accepts=("detect",))  # box centres are points
        return load_data_config(data)

    def load_split(self, data: Any, split: str) -> PointSplit:
        return read_point_split(self.load_data(data), split)

    def train_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device,
                       cfg: TrainOptions, workers: int) -> PointTrainPipeline:
        augment = cfg.augment()
        unused = augment.unused(self.augmentations)
        if unused:
            log.warning("%s: no effect on point training, which warps, colours and flips single images (no mosaic)",
                        ", ".join(unused))
        return PointTrainPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, augment=augment,
                                  workers=workers, seed=cfg.seed)

    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> PointValPipeline:
        return PointValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device, workers=workers)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        options = PointOptions(conf=settings.conf, max_det=settings.max_det)
        return evaluate_points(model, forward, pipeline, options=options, half=settings.half, progress=progress)

    def empty_best(self) -> dict[str, float]:
        return {"F1": 0.0, "precision": 0.0, "recall": 0.0}

    def postprocess_options(self, options: Mapping[str, Any]) -> PointOptions:
        return PointOptions(conf=options.get("conf", 0.25), max_det=options.get("max_det", 300),
                            classes=options.get("classes"))

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        tensor, info = letterbox(image, imgsz)
        return Prepared(tensor, info)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        points = points_to_original(prediction.float().cpu(), info)
        return Results(image, name, names, speed=speed, contents={"points": Points(points, info.orig_shape)})
