"""Semantic validation over a (possibly sharded) split: class maps carried back to each original
image and counted against its mask; confusion matrices summed over ranks.

The prediction of every image goes through the same steps as ``model(image)`` (letterbox, the
family's inference seam and post-processing, ``map_to_original``), so the metrics describe what
users get from ``Results.masks``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

from ..rank_sums import sum_over_ranks
from .class_map import map_to_original
from .metrics import SemanticMetrics, SemanticResult, semantic_result

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_semantic(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                      half: bool = False, progress: bool = True) -> SemanticResult:
    """mIoU of ``forward`` (images -> the family's inference outputs) over ``pipeline``'s split.

    ``pipeline`` yields ``MaskValBatch``es. ``half``: the network holds fp16 weights. Returns the
    same result on every rank.
    """
    env = libreyolo_ddp.dist_env()
    metrics = SemanticMetrics(model.nc, model.names)
    started = time.perf_counter()
    for batch in tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0):
        images = batch.images.half() if half else batch.images
        for class_map, mask, info in zip(model.family.postprocess(forward(images), None), batch.targets, batch.infos):
            metrics.update(map_to_original(class_map, info), mask)
    confusion, n_images = metrics.matrix(), metrics.n_images
    confusion, n_images = sum_over_ranks(confusion, n_images)
    result = semantic_result(confusion, n_images, model.names)
    log.debug("semantic validation of %d images in %.1f s", n_images, time.perf_counter() - started)
    return result
