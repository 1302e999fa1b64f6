"""Matte validation over a (possibly sharded) split: each picture's alpha predicted as ``predict``
predicts it (the network at ``imgsz x imgsz``, resized back to the picture), scored against its
ground-truth alpha at the picture's size; per-image sums added over ranks."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

from ..comparison_pictures import save_comparison
from ..rank_sums import sum_over_ranks
from .alpha import AlphaMatte
from .metrics import MatteMetrics, MatteResult
from .resize import alpha_to_picture

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_matte(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                   half: bool = False, progress: bool = True, pictures: Path | None = None) -> MatteResult:
    """Mean MAE / S-measure and maxF of ``forward`` (images -> the family's alphas) over ``pipeline``
    (``MatteBatch``es with ``alphas``). ``half``: the network holds fp16 weights. Returns the same
    result on every rank. ``pictures``: draw the first batches there (input, predicted alpha, true
    alpha: ``comparison_pictures``)."""
    env = libreyolo_ddp.dist_env()
    metrics = MatteMetrics()
    started = time.perf_counter()
    for number, batch in enumerate(tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0)):
        images = batch.images.half() if half else batch.images
        alphas = model.family.postprocess(forward(images), None)
        for alpha, truth in zip(alphas, batch.alphas):
            matte = AlphaMatte(alpha_to_picture(alpha, (int(truth.shape[0]), int(truth.shape[1]))).cpu())
            metrics.update(matte.pixels(), np.asarray(truth))
        save_comparison(pictures, number, [(image, alpha, truth) for image, alpha, truth
                                           in zip(batch.images, alphas, batch.alphas)])
    sums, n_images = torch.from_numpy(metrics.sums), metrics.n_images
    sums, n_images = sum_over_ranks(sums, n_images)
    log.debug("matte validation of %d images in %.1f s", n_images, time.perf_counter() - started)
    return metrics.result(sums.numpy(), n_images)
