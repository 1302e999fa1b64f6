"""Text reading: ``Results.ocr``, the text lines of each picture (inference only).

Each picture is resized as the published PP-OCR pipeline does (the short side brought up to
``imgsz`` when smaller, both sides rounded to multiples of 32), not letterboxed; the family's
``inference_forward`` returns the text probability map at that size; its post-processing object
finds the boxes, cuts each line from the original picture and recognises it (``make_results``).
Datasets, training and validation are not part of this task yet (they say so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ..base import Prepared
from ..padded_batch import padded_batch
from ..predict_only import PredictOnlyTask
from ..results import Results
from .text_lines import TextLines

_PREDICT_ONLY = ("the ocr task predicts only: text datasets, training and validation (word accuracy, detection "
                 "H-mean) are not implemented yet; use model.predict(...)")
MULTIPLE = 32


def network_size(h: int, w: int, imgsz: int) -> tuple[int, int]:
    """The detector's input size: scaled so the short side is at least ``imgsz`` (never down), each
    side then rounded to a multiple of 32 (RapidOCR's ``limit_type: min``)."""
    ratio = imgsz / min(h, w) if min(h, w) < imgsz else 1.0
    return (max(MULTIPLE, int(round(int(h * ratio) / MULTIPLE) * MULTIPLE)),
            max(MULTIPLE, int(round(int(w * ratio) / MULTIPLE) * MULTIPLE)))


def resize_picture(pixels: Tensor, size: tuple[int, int]) -> Tensor:
    """RGB ``uint8 [H, W, 3]`` -> ``float32 [3, h, w]`` in [0, 1] (bilinear)."""
    chw = pixels.permute(2, 0, 1).float().div_(255.0)[None]
    if tuple(chw.shape[-2:]) != size:
        chw = F.interpolate(chw, size=size, mode="bilinear", align_corners=False)
    return chw[0]


class OcrTask(PredictOnlyTask):
    name: ClassVar[str] = "ocr"
    results_field: ClassVar[str] = "ocr"
    reduced_decode: ClassVar[bool] = False  # lines are cut from the full picture
    predict_only: ClassVar[str] = _PREDICT_ONLY
    training_refusal: ClassVar[str | None] = _PREDICT_ONLY

    def postprocess_options(self, options: Mapping[str, Any]) -> dict[str, float]:
        """``conf`` is the text confidence floor (default 0.5, as RapidOCR's ``text_score``)."""
        if options.get("classes") is not None:
            raise ConfigError(f"classes={options['classes']} filters detections by class; an OCR model has one "
                              "class (text): filter Results.ocr.texts instead")
        conf = options.get("conf")
        return {"text_score": 0.5 if conf is None else float(conf)}

    def prepare(self, image: np.ndarray, imgsz: int) -> Prepared:
        h, w = image.shape[:2]
        size = network_size(h, w, imgsz)
        return Prepared(resize_picture(torch.from_numpy(np.ascontiguousarray(image)), size), ((h, w), size))

    def prepare_batch(self, images: Sequence[Tensor], imgsz: int, dtype: torch.dtype, device: torch.device,
                      orig_shapes: Sequence[tuple[int, int]] | None = None) -> tuple[Tensor, list[Any]]:
        """Each picture resized on ``device`` to its own size; pictures of different sizes in one
        batch are padded with zeros on the right and bottom to the largest (the map is cut back)."""
        batch, infos = padded_batch(images, imgsz, dtype, device, network_size=network_size, resize=resize_picture)
        return batch, list(infos)

    def make_results(self, image: np.ndarray, name: str, names: dict[int, str], prediction: Any, info: Any,
                     speed: dict[str, float]) -> Results:
        """``prediction`` is the family's per-picture reader (``read(image, network_size)`` -> polygons,
        texts, scores, det_scores): recognition runs here, on the original picture's pixels."""
        _, size = info
        lines = prediction.read(image, size)
        content = TextLines(lines["polygons"], lines["texts"], lines["scores"], lines["det_scores"])
        return Results(image, name, names, speed=speed, contents={"ocr": content})
