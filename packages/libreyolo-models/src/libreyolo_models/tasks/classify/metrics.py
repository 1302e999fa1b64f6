"""Classification metrics: top-1 and top-5 accuracy, per-class accuracy, the confusion matrix.

Ties: when classes share a score, the lower class id ranks first (a stable descending sort), so
top-k never depends on the order of a sort's internals. A class absent from the split has no
accuracy (NaN in ``per_class``, "-" in the table) and is left out of ``mean_class_accuracy``
(balanced accuracy over the classes present). Every rank counts its shard; the counts are summed
over ranks (one all-reduce), so every rank holds the same result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)

TOP_K = 5


def truth_rank(scores: Tensor, labels: Tensor) -> Tensor:
    """How many classes rank before the true class: ``int64 [B]`` (0 means a top-1 hit).

    Args:
        scores: ``float [B, nc]`` (logits or probabilities; only the order matters).
        labels: ``int64 [B]`` true class ids.
    """
    truth = scores.gather(1, labels[:, None])
    ids = torch.arange(scores.shape[1], device=scores.device)[None, :]
    before = (scores > truth) | ((scores == truth) & (ids < labels[:, None]))
    return before.sum(dim=1)


class ClassifyCounter:
    """Counts accumulated over batches: the confusion matrix and top-k hits."""

    def __init__(self, nc: int) -> None:
        self.nc = nc
        self.confusion = torch.zeros(nc, nc, dtype=torch.int64)
        self.topk_hits = 0

    def update(self, scores: Tensor, labels: Tensor) -> None:
        """One batch: ``scores float [B, nc]``, ``labels int64 [B]`` (any device)."""
        scores, labels = scores.detach().float().cpu(), labels.detach().cpu().long()
        rank = truth_rank(scores, labels)
        predicted = labels.clone()
        wrong = rank > 0
        if bool(wrong.any()):
            # The top-1 class under the same tie rule: the first maximum (argmax picks the lowest id).
            predicted[wrong] = scores[wrong].argmax(dim=1)
        self.confusion += torch.bincount(labels * self.nc + predicted, minlength=self.nc * self.nc).view(self.nc, self.nc)
        self.topk_hits += int((rank < min(TOP_K, self.nc)).sum())

    def reduced(self) -> ClassifyCounter:
        """The counts summed over every rank (itself when not distributed)."""
        if libreyolo_ddp.dist_env().world_size == 1 or not libreyolo_ddp.is_dist_initialized():
            return self
        flat = torch.cat((self.confusion.flatten(), torch.tensor([self.topk_hits])))
        total = libreyolo_ddp.all_reduce_sum(flat)
        out = ClassifyCounter(self.nc)
        out.confusion = total[:-1].view(self.nc, self.nc).clone()
        out.topk_hits = int(total[-1])
        return out

    def result(self, names: dict[int, str]) -> ClassifyMetrics:
        return ClassifyMetrics(self.confusion.numpy().copy(), self.topk_hits, dict(names))


@dataclass(frozen=True)
class ClassifyMetrics:
    """One validation's classification metrics (the task's ``TaskMetrics``).

    Attributes:
        confusion: ``int64 [nc, nc]``; row = true class, column = predicted (top-1) class.
        topk_hits: images whose true class is among the ``min(5, nc)`` best scores.
        names: class id -> name.
    """

    confusion: np.ndarray
    topk_hits: int
    names: dict[int, str]

    @property
    def n_images(self) -> int:
        return int(self.confusion.sum())

    @property
    def top1(self) -> float:
        return float(np.trace(self.confusion) / self.n_images) if self.n_images else 0.0

    @property
    def top5(self) -> float:
        return self.topk_hits / self.n_images if self.n_images else 0.0

    @property
    def support(self) -> np.ndarray:
        """``int64 [nc]`` images of each class in the split."""
        return self.confusion.sum(axis=1)

    @property
    def per_class(self) -> np.ndarray:
        """``float64 [nc]`` accuracy (recall) per class; NaN for a class absent from the split."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.support > 0, np.diag(self.confusion) / self.support, np.nan)

    @property
    def mean_class_accuracy(self) -> float:
        """Mean of ``per_class`` over the classes present (balanced accuracy)."""
        present = self.per_class[self.support > 0]
        return float(present.mean()) if len(present) else 0.0

    @property
    def fitness(self) -> float:
        """What "best" maximises: top-1 accuracy."""
        return self.top1

    def as_dict(self) -> dict[str, float]:
        return {"metrics/accuracy_top1": self.top1, "metrics/accuracy_top5": self.top5,
                "metrics/accuracy_mean_class": self.mean_class_accuracy}

    def best_fields(self) -> dict[str, float]:
        return {"top1": self.top1, "top5": self.top5}

    def summary(self) -> str:
        absent = int((self.support == 0).sum())
        return (f"top1 {self.top1:.4f}  top5 {self.top5:.4f}  mean class {self.mean_class_accuracy:.4f}  "
                f"({self.n_images} images" + (f", {absent} classes absent" if absent else "") + ")")

    def table(self) -> str:
        width = max([5, *(len(n) for n in self.names.values())])
        lines = [f"{'class':<{width}}  {'images':>7}  {'top1 acc':>8}", f"{'all':<{width}}  {self.n_images:>7}  "
                 f"{self.top1:>8.4f}   top5 {self.top5:.4f}"]
        for cid, name in self.names.items():
            acc = self.per_class[cid]
            lines.append(f"{name:<{width}}  {int(self.support[cid]):>7}  {'-' if np.isnan(acc) else f'{acc:.4f}':>8}")
        return "\n".join(lines)


@torch.no_grad()
def evaluate_classification(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                            half: bool = False, progress: bool = True) -> ClassifyMetrics:
    """Metrics of ``forward`` (images -> logits) over ``pipeline``'s split, the same on every rank."""
    counter = ClassifyCounter(model.nc)
    started = time.perf_counter()
    rank = libreyolo_ddp.dist_env().rank
    for batch in tqdm(pipeline, desc="val", leave=False, disable=not progress or rank != 0):
        images = batch.images.half() if half else batch.images
        counter.update(forward(images), batch.targets)
    result = counter.reduced().result(model.names)
    log.debug("validation of %d images in %.1f s", result.n_images, time.perf_counter() - started)
    return result


def write_confusion_plots(confusion: np.ndarray, names: Mapping[int, str], save_dir: Path) -> list[Path]:
    """``confusion_matrix.png`` (counts) and ``confusion_matrix_normalized.png`` (row shares) into
    ``save_dir``: what ``val(plots=True)`` and the last epoch of training write (rows true class,
    columns the top-1 prediction; no background row, unlike detection's)."""
    from ..plots import plot_confusion

    save_dir.mkdir(parents=True, exist_ok=True)
    written = [plot_confusion(confusion, names, save_dir / "confusion_matrix.png", normalize=False, background=False),
               plot_confusion(confusion, names, save_dir / "confusion_matrix_normalized.png", normalize=True,
                              background=False)]
    log.info("validation artefacts written to %s", save_dir)
    return written
