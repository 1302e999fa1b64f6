"""Text reading: ``Results.ocr``, the text lines of each picture (inference only).

Each picture is resized as the published PP-OCR pipeline does (the short side brought up to
``imgsz`` when smaller, both sides rounded to multiples of 32), not letterboxed; the family's
``inference_forward`` returns the text probability map at that size; its post-processing object
finds the boxes, cuts each line from the original picture and recognises it (``make_results``).
Validation reads text datasets in PaddleOCR's label format (``labels``; the bundled
``shapes-ocr``) and scores detection and end-to-end reading (``metrics``, ``validation``).
Training is not part of this task (it says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...errors import ConfigError
from ..base import Batch, EvalSettings, Prepared, PretrainedOnlyTask
from ..bundled_sets import resolve_bundled
from ..padded_batch import padded_batch
from ..results import Results
from .labels import OcrData, OcrSplit, load_ocr_data, read_ocr_split
from .metrics import OcrResult
from .shapes_ocr import BUNDLED_NAMES, ensure_shapes_ocr
from .text_lines import TextLines
from .validation import OcrBatch, OcrValPipeline, evaluate_ocr

if TYPE_CHECKING:
    from ...data.cache_store import CacheSetting
    from ..base import ModelView

_NO_TRAINING = ("the ocr task is pretrained-only here: training PP-OCR (the DB detector's and the CTC "
                "recogniser's losses) is not implemented; use model.predict(...), or model.val(data=...) on a "
                "text dataset in PaddleOCR's label format (or the bundled 'shapes-ocr')")
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


class OcrTask(PretrainedOnlyTask):
    name: ClassVar[str] = "ocr"
    fitness_name: ClassVar[str] = "end-to-end H-mean"
    results_field: ClassVar[str] = "ocr"
    reduced_decode: ClassVar[bool] = False  # lines are cut from the full picture
    training_refusal: ClassVar[str | None] = _NO_TRAINING

    def load_data(self, data: Any) -> OcrData:
        """A text data.yaml (PaddleOCR label files), a folder holding one, a dict, or ``"shapes-ocr"``."""
        data = resolve_bundled(data, self.name, BUNDLED_NAMES, ensure_shapes_ocr)
        return load_ocr_data(data)

    def load_split(self, data: Any, split: str) -> OcrSplit:
        return read_ocr_split(self.load_data(data), split)

    def has_split(self, data: Any, split: str) -> bool:
        return split in self.load_data(data).splits


    def val_pipeline(self, index: Any, *, imgsz: int, batch_size: int, device: torch.device, workers: int,
                     cache: CacheSetting) -> Iterable[Batch]:
        """Pictures read and sized as predict does (``workers`` and ``cache`` unused: each is read once)."""
        return cast(Iterable[Batch], OcrValPipeline(index, imgsz=imgsz, batch_size=batch_size, device=device,
                                                    network_size=network_size, resize=resize_picture))

    def evaluate(self, model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Batch], *,
                 settings: EvalSettings, progress: bool) -> OcrResult:
        return evaluate_ocr(model, forward, cast(Iterable[OcrBatch], pipeline), options=self.postprocess_options({}),
                            half=settings.half, progress=progress)

    def empty_best(self) -> dict[str, float]:
        return {"e2e_hmean": 0.0, "hmean": 0.0}

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
