"""Promptable segmentation: ``Results.masks`` holds, per prompt (points and/or a box given in the
picture's pixels), its masks at the original size and their predicted IoU (``PromptMasks``).

Each picture is resized so its longer side is ``imgsz`` (1024 for SAM) and padded to a square
(``resize``); the family's encoder turns the batch into image embeddings (cached per input), and
its ``predict_postprocess`` decodes the call's prompts per picture (``contract.prompts``).
Validation is the SAM paper's box-prompt evaluation on an instance-segmentation set, read as the
``segment`` task reads it (YOLO polygons, COCO JSON, the bundled ``"shapes-inst"``): each object's
box prompts one mask, scored by mask IoU at the picture's size (``box_validation``). Training is
refused before any work: the models of this task are pretrained-only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...contract.prompts import PromptPrediction, Prompts
from ...errors import ConfigError
from ..base import Batch, EvalSettings, Prepared, PretrainedOnlyTask, TaskMetrics
from ..bundled_sets import refuse_foreign_bundle
from ..results import Results
from ..segment.task import SegmentTask
from .box_metrics import BoxPromptResult
from .box_validation import BoxPromptPipeline, evaluate_box_prompts
from .prompt_masks import PromptMasks
from .prompt_options import parse_prompts
from .resize import square_input

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

_NO_TRAINING = ("the prompt-segment task is pretrained-only here: training a prompt-segment model (SAM) is not "
                "implemented; use model.val(data=...) on an instance-segmentation set (box prompts, mIoU), or "
                "model.predict(source, points=[[x, y]]) or boxes=[[x1, y1, x2, y2]]")


class PromptSegmentTask(PretrainedOnlyTask):
    name: ClassVar[str] = "prompt-segment"
    fitness_name: ClassVar[str] = "mIoU (box prompts)"
    results_field: ClassVar[str] = "masks"
    reduced_decode: ClassVar[bool] = False  # resized from the full picture, as published
    prompted: ClassVar[bool] = True
    classes_from_data: ClassVar[bool] = True
    training_refusal: ClassVar[str | None] = _NO_TRAINING

    def __init__(self) -> None:
        self.masks = SegmentTask()
        """Reads the data (instance masks), as the segment task does."""

    def load_data(self, data: Any) -> Any:
        refuse_foreign_bundle(data, self.name, accepts=("segment",),
                              purpose="prompt-segment validation (it scores instance masks)")
        return self.masks.load_data(data)

    def load_split(self, data: Any, split: str) -> Any:
        return self.masks.load_split(data, split)


    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> Iterable[Batch]:
        """Pictures read and prepared as predict prepares them (``workers`` and ``cache`` unused:
        each picture is read once, at its full size)."""
        return BoxPromptPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device)

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> TaskMetrics:
        names = getattr(pipeline, "names", None) or model.names
        return evaluate_box_prompts(model, forward, pipeline, names=names, half=settings.half,
                                    progress=progress)

    def empty_best(self) -> dict[str, float]:
        return BoxPromptResult(0.0, 0.0, 0.0, 0, 0, {}, {}).best_fields()

    def postprocess_options(self, options: Mapping[str, Any]) -> Prompts:
        if options.get("classes") is not None:
            raise ConfigError(f"classes={options['classes']} filters detections; a prompt-segment model returns the "
                              "masks of its prompts, so there is nothing to filter")
        return parse_prompts(options)

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        x, info = square_input(torch.from_numpy(np.ascontiguousarray(image)), imgsz, torch.float32)
        return Prepared(x, info)

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """Each picture resized and padded on ``device`` (``resize.square_input``), stacked."""
        pairs = [square_input(image.to(device, non_blocking=True), imgsz, dtype) for image in images]
        return torch.stack([x for x, _ in pairs]), [info for _, info in pairs]

    def predictions_to_host(self, predictions: list[PromptPrediction]) -> list[PromptPrediction]:
        return [PromptPrediction(p.masks.cpu(), p.scores.cpu(), p.logits.cpu(), p.image,
                                 None if p.points is None else p.points.cpu()) for p in predictions]

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: PromptPrediction,
                     info: Any, speed: dict[str, float]) -> Results:
        masks = PromptMasks(prediction.masks, prediction.scores, prediction.logits, prediction.image,
                            points=prediction.points)
        return Results(image, name, names, speed=speed, masks=masks)
