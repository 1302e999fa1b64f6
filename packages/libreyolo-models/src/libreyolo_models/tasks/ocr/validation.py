"""OCR validation: each picture read as predict reads it, its lines scored (``metrics``).

The pipeline decodes each picture as predict decodes a file and sizes it as predict does
(``task.network_size``, padded batches); the family's post-processing then finds, cuts, turns and
reads the lines from the original picture, with predict's defaults (text confidence 0.5), so the
lines scored are the lines ``predict`` returns. Pictures are sharded over ranks and the tallies
added.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

from ...data.image_files import read_image
from ..padded_batch import padded_batch
from ..rank_sums import sum_over_ranks
from .labels import OcrSplit, TextBox
from .metrics import OcrResult, PictureCounts, score_picture, total

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)


@dataclass
class OcrBatch:
    """``images``: ``[B, 3, h, w]`` on the device (predict's input); per picture its pixels, its
    ``((H, W), (h, w))`` sizes, its labelled lines."""

    images: Tensor
    pictures: list[np.ndarray]
    infos: list[tuple[tuple[int, int], tuple[int, int]]]
    labels: list[list[TextBox]]


class OcrValPipeline:
    """This rank's share of a split's pictures, ``batch_size`` at a time."""

    def __init__(self, split: OcrSplit, *, imgsz: int, batch_size: int, device: torch.device,
                 network_size: Callable[[int, int, int], tuple[int, int]],
                 resize: Callable[[Tensor, tuple[int, int]], Tensor]) -> None:
        env = libreyolo_ddp.dist_env()
        self.split, self.imgsz, self.batch_size, self.device = split, imgsz, max(1, batch_size), device
        self.network_size, self.resize = network_size, resize
        self.items = list(range(env.rank, len(split), env.world_size))

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self) -> Iterator[OcrBatch]:
        for lo in range(0, len(self.items), self.batch_size):
            chosen = self.items[lo:lo + self.batch_size]
            pictures = [read_image(self.split.images[i]) for i in chosen]
            tensors = [torch.from_numpy(np.require(p, requirements=("C", "W"))) for p in pictures]
            images, infos = padded_batch(tensors, self.imgsz, torch.float32, self.device,
                                         network_size=self.network_size, resize=self.resize)
            yield OcrBatch(images, pictures, infos, [self.split.lines[i] for i in chosen])


@torch.no_grad()
def evaluate_ocr(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[OcrBatch], *,
                 options: Mapping[str, Any], half: bool = False, progress: bool = True) -> OcrResult:
    """Detection and end-to-end scores of the model over ``pipeline`` (the same on every rank)."""
    env = libreyolo_ddp.dist_env()
    counts: list[PictureCounts] = []
    started = time.perf_counter()
    for batch in tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0):
        outputs = forward(batch.images.half() if half else batch.images)
        for prediction, picture, (_, size), labels in zip(model.family.postprocess(outputs, options), batch.pictures,
                                                          batch.infos, batch.labels, strict=True):
            lines = prediction.read(picture, size)
            counts.append(score_picture(labels, list(np.asarray(lines["polygons"])), lines["texts"]))
    sums = np.asarray([[c.lines, c.detections, c.matches, c.read] for c in counts], dtype=np.int64).reshape(-1, 4)
    summed, n_images = sums.sum(0), len(counts)
    totals, n_images = sum_over_ranks(torch.from_numpy(summed), n_images)
    summed = totals.numpy()
    log.debug("OCR validation of %d images in %.1f s", n_images, time.perf_counter() - started)
    return total(summed, n_images)
