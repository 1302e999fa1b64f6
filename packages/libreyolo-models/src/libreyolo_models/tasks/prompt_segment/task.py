"""Promptable segmentation: ``Results.masks`` holds, per prompt (points and/or a box given in the
picture's pixels), its masks at the original size and their predicted IoU (``PromptMasks``).

Each picture is resized so its longer side is ``imgsz`` (1024 for SAM) and padded to a square
(``resize``); the family's encoder turns the batch into image embeddings (cached per input), and
its ``predict_postprocess`` decodes the call's prompts per picture (``contract.prompts``).
Datasets, training and validation are not part of this task: those verbs say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ...contract.prompts import PromptPrediction, Prompts
from ...errors import ConfigError
from ..base import Prepared
from ..predict_only import PredictOnlyTask
from ..results import Results
from .prompt_masks import PromptMasks
from .prompt_options import parse_prompts
from .resize import square_input

_PREDICT_ONLY = ("the prompt-segment task predicts only: a prompt-segment model (SAM) is pretrained-only here, so "
                 "datasets, training and validation are not implemented; use model.predict(source, points=[[x, y]]) "
                 "or boxes=[[x1, y1, x2, y2]]")


class PromptSegmentTask(PredictOnlyTask):
    name: ClassVar[str] = "prompt-segment"
    results_field: ClassVar[str] = "masks"
    reduced_decode: ClassVar[bool] = False  # resized from the full picture, as published
    prompted: ClassVar[bool] = True
    predict_only: ClassVar[str] = _PREDICT_ONLY

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
        return [PromptPrediction(p.masks.cpu(), p.scores.cpu(), p.logits.cpu(), p.image) for p in predictions]

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: PromptPrediction,
                     info: Any, speed: dict[str, float]) -> Results:
        masks = PromptMasks(prediction.masks, prediction.scores, prediction.logits, prediction.image)
        return Results(image, name, names, speed=speed, masks=masks)
