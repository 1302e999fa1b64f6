"""Point validation over a (possibly sharded) split: predictions carried back to each picture as
``model(image)`` returns them (letterbox, the family's seam and post-processing, the mapping
back), normalised to the picture and counted against its labelled points; counts added over ranks."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

from .metrics import CONF_SWEEP, PointMetrics, PointResult
from .points_geometry import points_to_original

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_points(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                    options: Any, half: bool = False, progress: bool = True) -> PointResult:
    """P / R / F1 of ``forward`` (images -> the family's inference outputs) over ``pipeline``.

    ``pipeline`` yields ``PointValBatch``es; ``options`` are the family's post-processing options
    (their ``conf`` should be at most ``CONF_SWEEP[0]``). Returns the same result on every rank.
    """
    env = libreyolo_ddp.dist_env()
    metrics = PointMetrics(model.nc, model.names)
    started = time.perf_counter()
    for batch in tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0):
        images = batch.images.half() if half else batch.images
        for points, labelled, info in zip(model.family.postprocess(forward(images), options), batch.targets,
                                          batch.infos):
            mapped = points_to_original(points.float().cpu(), info).numpy().astype(np.float64)
            h, w = info.orig_shape
            mapped[:, :2] /= np.array([w, h], dtype=np.float64)
            metrics.update(mapped, labelled)
    counts, extra = metrics.counts, metrics.extra
    if env.world_size > 1:
        counts = libreyolo_ddp.all_reduce_sum(torch.from_numpy(counts)).numpy()
        extra = libreyolo_ddp.all_reduce_sum(torch.from_numpy(extra)).numpy()
    log.debug("point validation over %d thresholds in %.1f s", len(CONF_SWEEP), time.perf_counter() - started)
    return metrics.result(counts, extra)
