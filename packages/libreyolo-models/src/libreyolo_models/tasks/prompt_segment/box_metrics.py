"""The box-prompt evaluation of the SAM paper: every ground-truth object is prompted with its box,
and its one predicted mask is scored by its IoU with the object's mask, both at the picture's own
resolution. Headline: the mean IoU over all objects (mIoU, the fitness); also the mean per class
and the share of objects whose IoU reaches 0.5 and 0.75."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

THRESHOLDS = (0.5, 0.75)
"""IoU levels whose share of objects is reported (an object "found" at 0.5, "well cut" at 0.75)."""


def paired_iou(pred: Tensor, gt: Tensor) -> Tensor:
    """IoU of ``bool [N, H, W]`` masks with ``bool [N, H, W]``, pair by pair -> ``float64 [N]`` (0 where
    both are empty, as ``tasks.segment.scoring.mask_iou`` and pycocotools)."""
    p, g = pred.reshape(len(pred), -1), gt.reshape(len(gt), -1)
    inter = (p & g).sum(1).double()
    union = (p | g).sum(1).double()
    return torch.where(union > 0, inter / union.clamp(min=1), torch.zeros_like(inter))


@dataclass(frozen=True)
class BoxPromptResult:
    """One validation's outcome. ``per_class``: class id -> (objects, mean IoU, share >= 0.5,
    share >= 0.75), for the classes with objects."""

    miou: float
    iou50: float
    iou75: float
    n_objects: int
    n_images: int
    names: dict[int, str]
    per_class: dict[int, tuple[int, float, float, float]]

    @property
    def fitness(self) -> float:
        return self.miou

    def as_dict(self) -> dict[str, float]:
        return {"metrics/mIoU": self.miou, "metrics/IoU50": self.iou50, "metrics/IoU75": self.iou75}

    def best_fields(self) -> dict[str, float]:
        return {"mIoU": self.miou}

    def class_miou(self) -> dict[str, float]:
        """Class name -> the mean IoU of its objects."""
        return {self.names.get(c, str(c)): row[1] for c, row in self.per_class.items()}

    def summary(self) -> str:
        return (f"mIoU {self.miou:.4f}  IoU>=0.5 {self.iou50:.1%}  IoU>=0.75 {self.iou75:.1%}  "
                f"({self.n_objects} box prompts in {self.n_images} images)")

    def table(self) -> str:
        head = f"{'Class':>16}{'Objects':>9}{'mIoU':>9}{'>=0.5':>9}{'>=0.75':>9}"
        rows = [head, f"{'all':>16}{self.n_objects:>9}{self.miou:>9.4f}{self.iou50:>9.3f}{self.iou75:>9.3f}"]
        for c, (n, miou, at50, at75) in self.per_class.items():
            rows.append(f"{self.names.get(c, str(c))[:16]:>16}{n:>9}{miou:>9.4f}{at50:>9.3f}{at75:>9.3f}")
        return "\n".join(rows)


class BoxPromptMetrics:
    """Per-class sums over the objects seen: count, IoU, and hits at each of ``THRESHOLDS``."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = dict(names)
        self.sums = torch.zeros((2 + len(THRESHOLDS), max(names, default=0) + 1), dtype=torch.float64)
        self.n_images = 0

    def update(self, iou: Tensor, classes: Tensor) -> None:
        """Count one image: its objects' ``float [n]`` IoU and ``int [n]`` class ids."""
        self.n_images += 1
        if not len(iou):
            return
        cls = classes.long().cpu()
        if int(cls.min()) < 0 or int(cls.max()) >= self.sums.shape[1]:  # the readers reject such labels
            raise ValueError(f"class ids {cls.unique().tolist()} outside the dataset's {self.sums.shape[1]} classes")
        values = [torch.ones_like(iou, dtype=torch.float64), iou.double().cpu()]
        values += [(iou.double().cpu() >= t).double() for t in THRESHOLDS]
        for row, value in enumerate(values):
            self.sums[row].index_add_(0, cls, value)

    def result(self, sums: Tensor | None = None, n_images: int | None = None) -> BoxPromptResult:
        """The means (over ``sums`` / ``n_images`` when given: the totals over ranks)."""
        sums = self.sums if sums is None else sums
        totals = sums.sum(1)
        n = float(totals[0])
        share = (totals / max(n, 1.0)).tolist()
        per_class = {c: (int(sums[0, c]), float(sums[1, c] / sums[0, c]), float(sums[2, c] / sums[0, c]),
                         float(sums[3, c] / sums[0, c]))
                     for c in range(sums.shape[1]) if sums[0, c] > 0}
        return BoxPromptResult(miou=share[1], iou50=share[2], iou75=share[3], n_objects=int(n),
                               n_images=self.n_images if n_images is None else n_images, names=self.names,
                               per_class=per_class)
