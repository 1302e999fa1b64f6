"""Validation over a (possibly sharded) split: predictions matched per image, metrics on rank 0.

Every rank runs its own shard (no rank idles in a collective while another validates everything),
then the per-image statistics, a few kilobytes each, are gathered to rank 0 and the metric is
computed once there and broadcast, so every rank takes the same early-stopping decision. NMS sees
at most ``MAX_NMS_CANDIDATES`` boxes per image, so an untrained model cannot stall validation.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from tqdm import tqdm

import libreyolo_ddp

from ...layers.boxes import xywh_to_xyxy
from ..loss_meter import LossMeter
from .matching import match_image
from .metrics import DetectionMetrics, MetricsResult

if TYPE_CHECKING:
    from ..base import ModelView
    from .artefacts import DetectArtefacts
    from .task import DetectOptions

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_detections(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                        options: DetectOptions, half: bool = False, progress: bool = True,
                        artefacts: DetectArtefacts | None = None, losses: LossMeter | None = None) -> MetricsResult:
    """mAP of ``forward`` (images -> the family's inference outputs) over ``pipeline``'s split.

    ``half``: the network holds fp16 weights, so images are cast to fp16 on the way in.
    ``artefacts``: also collect and write plots / ``predictions.json`` (see ``tasks.detect.artefacts``).
    ``losses``: also average the family's loss over the batches (``tasks.loss_meter``).
    Returns the same ``MetricsResult`` on every rank.
    """
    env = libreyolo_ddp.dist_env()
    metrics = DetectionMetrics(model.nc, model.names)
    started = time.perf_counter()
    bar = tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0, file=None)
    for number, batch in enumerate(bar):
        images = batch.images.half() if half else batch.images
        detections = model.family.postprocess(forward(images), options)
        if losses is not None:
            losses.update(images, batch.targets)
        if artefacts is not None:
            artefacts.batch_pictures(number, images, batch.targets, detections, batch.paths)
        size = torch.tensor([images.shape[3], images.shape[2]] * 2, device=batch.targets.device)
        for i, det in enumerate(detections):
            rows = batch.targets[batch.targets[:, 0] == i]
            gt = xywh_to_xyxy(rows[:, 2:6]) * size
            metrics.update(match_image(det[:, :4].cpu(), det[:, 4].cpu(), det[:, 5].long().cpu(),
                                       gt.cpu(), rows[:, 1].long().cpu()))
            if artefacts is not None:
                artefacts.update(det, gt, rows[:, 1], path=batch.paths[i], orig_shape=batch.ori_sizes[i],
                                 ratio_pad=batch.ratio_pad[i] if batch.ratio_pad else None)
    if env.world_size > 1:
        gathered = libreyolo_ddp.gather_to_rank_zero(metrics.image_stats)
        result = None
        if env.rank == 0:
            merged = DetectionMetrics(model.nc, model.names)
            merged.merge(*(gathered or []))
            result = merged.compute()
            metrics = merged
        result = libreyolo_ddp.broadcast_object(result, src=0)
    else:
        result = metrics.compute()
    if losses is not None:
        result = dataclasses.replace(result, losses=losses.result())
    if artefacts is not None:
        artefacts.finish(metrics if env.rank == 0 else None)
    log.debug("validation of %d images in %.1f s", result.n_images, time.perf_counter() - started)
    return result
