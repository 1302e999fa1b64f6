"""Semantic segmentation metrics from a confusion matrix: mIoU, pixel accuracy, per-class IoU.

Every labelled pixel adds one count to ``confusion[true, predicted]``; pixels whose mask value is
the ignore index add nothing, whatever was predicted there. From the matrix, per class
``IoU = TP / (TP + FP + FN)``. A class with no pixel in either the ground truth or the
prediction (union 0) has no IoU: it is left out of the mean rather than counted as 0 or 1, so
a class absent from the validation split does not move mIoU as long as the model does not
predict it either (if it does, its IoU is 0 and it counts). Pixel accuracy is the share of
labelled pixels predicted right. Fitness ("best") is mIoU, as the published SegFormer results
rank models. No labelled pixel at all gives zeros, never NaN.

Distributed validation: each rank accumulates its shard's matrix; the matrices are summed over
ranks, so the result does not depend on how images were split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ...errors import ConfigError
from .mask_files import IGNORE_INDEX


@dataclass(frozen=True)
class SemanticResult:
    """One validation's outcome.

    Attributes:
        miou: mean IoU over classes with a non-empty union, in [0, 1].
        pixel_accuracy: correct labelled pixels / labelled pixels.
        iou: per class id, its IoU; classes with an empty union are absent.
        confusion: ``int64 [nc, nc]`` counts, rows the truth, columns the prediction.
        n_images: images validated; names: class id -> name (for ``table``).
    """

    miou: float
    pixel_accuracy: float
    iou: dict[int, float]
    confusion: Tensor
    n_images: int
    names: dict[int, str] = field(default_factory=dict)

    @property
    def fitness(self) -> float:
        return self.miou

    def as_dict(self) -> dict[str, float]:
        """``results.csv`` columns (upstream's names)."""
        return {"metrics/mIoU": self.miou, "metrics/pixel_accuracy": self.pixel_accuracy}

    def best_fields(self) -> dict[str, float]:
        return {"mIoU": self.miou, "pixel_accuracy": self.pixel_accuracy}

    def summary(self) -> str:
        return f"mIoU {self.miou:.4f}  pixel accuracy {self.pixel_accuracy:.4f}"

    def table(self) -> str:
        """``all`` then one row per class: labelled pixels, predicted pixels, IoU ("-": no union)."""
        truth, predicted = self.confusion.sum(1).tolist(), self.confusion.sum(0).tolist()
        names = [self.names.get(c, str(c)) for c in range(len(truth))]
        width = max([len("Class"), len("all")] + [len(n) for n in names])
        lines = [f"{'Class':>{width}}{'Images':>11}{'Pixels':>13}{'Predicted':>13}{'IoU':>9}",
                 f"{'all':>{width}}{self.n_images:>11}{sum(truth):>13}{sum(predicted):>13}{self.miou:>9.3f}"]
        for c, name in enumerate(names):
            iou = f"{self.iou[c]:>9.3f}" if c in self.iou else f"{'-':>9}"
            lines.append(f"{name:>{width}}{'':>11}{truth[c]:>13}{predicted[c]:>13}{iou}")
        return "\n".join(lines)


class SemanticMetrics:
    """Accumulates a confusion matrix on the device of the first update (no host sync per image)."""

    def __init__(self, nc: int, names: Mapping[int, str] | None = None) -> None:
        if not 0 < nc < IGNORE_INDEX:
            raise ConfigError(f"nc={nc}: semantic metrics need 1..{IGNORE_INDEX - 1} classes")
        self.nc = nc
        self.names = dict(names or {})
        self.confusion: Tensor | None = None
        self.n_images = 0

    def update(self, predicted: Tensor, truth: Tensor, *, images: int = 1) -> None:
        """Count class maps of ``images`` images.

        Args:
            predicted: integer class ids, any shape (values are clamped into ``0 .. nc-1``).
            truth: the same shape; class ids and ``IGNORE_INDEX`` (not counted).
            images: how many images these maps hold (for ``n_images``).
        """
        if predicted.shape != truth.shape:
            raise ConfigError(f"prediction of shape {tuple(predicted.shape)} does not match its mask "
                              f"{tuple(truth.shape)}")
        truth = truth.to(predicted.device).long().flatten()
        predicted = predicted.long().flatten()
        labelled = truth != IGNORE_INDEX
        # Ignore pixels go to one extra bin that is cut off: no boolean-mask selection, no sync.
        index = torch.where(labelled, truth * self.nc + predicted.clamp(0, self.nc - 1), self.nc * self.nc)
        counts = torch.bincount(index, minlength=self.nc * self.nc + 1)[: self.nc * self.nc]
        counts = counts.view(self.nc, self.nc)
        self.confusion = counts if self.confusion is None else self.confusion + counts.to(self.confusion.device)
        self.n_images += images

    def add(self, confusion: Tensor, n_images: int) -> None:
        """Fold in another accumulator's matrix (a rank's shard)."""
        self.confusion = confusion.clone() if self.confusion is None else self.confusion + confusion.to(
            self.confusion.device)
        self.n_images += n_images

    def matrix(self) -> Tensor:
        """The ``int64 [nc, nc]`` counts so far (zeros before any update)."""
        return self.confusion if self.confusion is not None else torch.zeros(self.nc, self.nc, dtype=torch.int64)

    def compute(self) -> SemanticResult:
        return semantic_result(self.matrix(), self.n_images, self.names)


def semantic_result(confusion: Tensor, n_images: int, names: Mapping[int, str] | None = None) -> SemanticResult:
    """mIoU, pixel accuracy and per-class IoU from a confusion matrix (rows truth, columns prediction)."""
    counts = confusion.detach().cpu().to(torch.float64)
    tp = counts.diagonal()
    union = counts.sum(0) + counts.sum(1) - tp
    iou = {c: float(tp[c] / union[c]) for c in range(len(tp)) if union[c] > 0}
    total = float(counts.sum())
    miou = math.fsum(iou.values()) / len(iou) if iou else 0.0
    accuracy = float(tp.sum()) / total if total > 0 else 0.0
    return SemanticResult(miou, accuracy, iou, confusion.detach().cpu().to(torch.int64), n_images, dict(names or {}))
