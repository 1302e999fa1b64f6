"""Restoration validation over a (possibly sharded) split: each picture restored as ``predict``
restores it (the family's inference seam, tiled beyond the training crop, and post-processing),
scored against its clean target; per-image sums added over ranks."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

from ..comparison_pictures import save_comparison
from ..rank_sums import sum_over_ranks
from .metrics import RestoreMetrics, RestoreResult

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_restoration(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                         half: bool = False, progress: bool = True, pictures: Path | None = None) -> RestoreResult:
    """Mean PSNR / SSIM of ``forward`` (images -> the family's inference outputs) over ``pipeline``.

    ``pipeline`` yields ``RestoreBatch``es of whole pictures. ``half``: the network holds fp16
    weights. Returns the same result on every rank. ``pictures``: draw the first batches there
    (degraded, restored, clean: ``comparison_pictures``).
    """
    env = libreyolo_ddp.dist_env()
    metrics = RestoreMetrics()
    started = time.perf_counter()
    for number, batch in enumerate(tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0)):
        images = batch.images.half() if half else batch.images
        restored = model.family.postprocess(forward(images), None)
        for out, clean, given in zip(restored, batch.targets, batch.images):
            metrics.update(out, clean, given)
        save_comparison(pictures, number, [(given, out, clean) for out, clean, given
                                           in zip(restored, batch.targets, batch.images)])
    sums, n_images = metrics.sums, metrics.n_images
    sums, n_images = sum_over_ranks(sums, n_images)
    log.debug("restoration validation of %d images in %.1f s", n_images, time.perf_counter() - started)
    return metrics.result(sums, n_images)
