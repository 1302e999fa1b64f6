"""PP-OCR's implementation of the family contract: inference only.

The detector is the inference seam (what a CUDA graph would capture, one graph per input shape);
DB boxes, the perspective crops, the recogniser (batched by width bucket) and CTC decoding run
eagerly afterwards, from the ``OcrPrediction`` that ``postprocess`` hands the task. The recogniser
needs the picture (crops are cut from the original pixels, not the resized input), so the
prediction carries the network that produced it and reads the picture when the task gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ...contract.family import Family, LossContext, LossResult
from ...errors import CheckpointError, ConfigError
from .ctc import characters
from .db_boxes import DBOptions, crop_line, reading_order, text_boxes
from .nn import PPOCRNet
from .recognize import recognize_lines, upright

_DET_KEY = "det.backbone.stem.weight"
_CLASSES_KEY = "rec.classifier.weight"
_INFERENCE_ONLY = ("PP-OCR is pretrained-only here: training its detector (DB loss) and recogniser (CTC with "
                   "synthetic text) is not implemented; convert the published weights with "
                   "python -m libreyolo_models.convert ppocr and use predict")


@dataclass(frozen=True)
class OcrOptions:
    """Predict settings: DB box extraction, the angle classifier's confidence to turn a line, the
    recogniser's batch and the text confidence floor."""

    db: DBOptions = DBOptions()
    angle_thresh: float = 0.9
    text_score: float = 0.5
    rec_batch: int = 16


@dataclass
class OcrPrediction:
    """One picture's text probability map and what reads the lines from it (eager)."""

    prob: Tensor
    net: nn.Module
    options: OcrOptions

    def read(self, image: np.ndarray, network_size: tuple[int, int]) -> dict[str, Any]:
        """``image`` RGB ``uint8 [H, W, 3]`` -> ``polygons [N, 4, 2]`` (picture pixels, clockwise from
        the top-left), ``det_scores``, ``texts``, ``scores`` (recognition confidence), in reading order;
        lines whose confidence is under ``text_score`` are dropped."""
        h, w = image.shape[:2]
        nh, nw = network_size
        prob = self.prob[:nh, :nw].float().cpu().numpy()
        boxes, det_scores = text_boxes(prob, (w / nw, h / nh), (h, w), self.options.db)
        order = reading_order(boxes)
        boxes, det_scores = boxes[order], det_scores[order]
        crops = [crop_line(image, b) for b in boxes]
        param = next(self.net.parameters())
        device, dtype = param.device, param.dtype
        crops = upright(self.net, crops, device=device, dtype=dtype, thresh=self.options.angle_thresh)
        decoded = recognize_lines(self.net, crops, device=device, dtype=dtype,
                                  batch=self.options.rec_batch) if crops else []
        keep = [i for i, (_, s) in enumerate(decoded) if s >= self.options.text_score]
        return {"polygons": boxes[keep].reshape(-1, 4, 2), "det_scores": det_scores[keep],
                "texts": [decoded[i][0] for i in keep], "scores": np.asarray([decoded[i][1] for i in keep],
                                                                           dtype=np.float32)}


class PPOCRFamily(Family):
    """PP-OCRv4 mobile: DB text detection, the v2.0 angle classifier, SVTR + CTC recognition."""

    _net: nn.Module | None = None

    def build_network(self) -> nn.Module:
        if self.size != "m":
            raise ValueError(f"PP-OCR has no size {self.size!r}; sizes: m (PP-OCRv4 mobile)")
        return PPOCRNet(len(characters()))

    @classmethod
    def infer_nc(cls, state: Mapping[str, Tensor], task: str) -> int:
        if _DET_KEY not in state:
            raise CheckpointError(f"not a PP-OCR state dict: {_DET_KEY!r} is missing")
        classes = state.get(_CLASSES_KEY)
        if classes is not None and int(classes.shape[0]) != len(characters()):
            raise CheckpointError(f"this PP-OCR recogniser has {int(classes.shape[0])} classes, the shipped "
                                  f"dictionary {len(characters())}: only the Chinese + English v4 model is supported")
        return 1

    @classmethod
    def infer_size(cls, state: Mapping[str, Tensor], task: str) -> str | None:
        return "m" if _DET_KEY in state else None

    def inference_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        """``[B, 3, H, W]`` RGB in [0, 1] -> text probability ``[B, H, W]``. Remembers ``net`` for the
        recogniser, which runs eagerly on the crops (the seam itself stays a pure tensor function)."""
        self._net = net
        return net(images)

    def training_forward(self, net: nn.Module, images: Tensor) -> Tensor:
        raise ConfigError(_INFERENCE_ONLY)

    def compute_loss(self, outputs: Any, targets: Any, ctx: LossContext) -> LossResult:
        raise ConfigError(_INFERENCE_ONLY)

    def postprocess(self, outputs: Tensor, options: Any) -> list[OcrPrediction]:
        if self._net is None:
            raise RuntimeError("PP-OCR postprocess ran before its inference forward")
        opts = OcrOptions(text_score=float(options.get("text_score", 0.5))) if isinstance(options, Mapping) \
            else OcrOptions()
        return [OcrPrediction(prob, self._net, opts) for prob in outputs.unbind(0)]

    def sample_targets(self, batch: int, imgsz: int, generator: torch.Generator) -> Tensor:
        """Probability maps (the parity tool's inference rows need none; here for the contract)."""
        return torch.rand((batch, imgsz, imgsz), generator=generator)
