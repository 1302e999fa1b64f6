"""Validation of an instance task over a (possibly sharded) split: the family's post-processing,
then per image its box statistics and the task's own (``score``), metrics on rank 0; with a loss
meter, also the family's loss on the batches (``tasks.loss_meter``)."""

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

from ...contract.instances import InstancePrediction
from ..detect.matching import ImageStats, match_image
from ..loss_meter import LossMeter
from .artefacts import InstanceArtefacts
from .geometry import InstanceSample
from .metrics import InstanceMetrics, InstanceResult
from .pipeline import InstanceKind, training_targets

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)

ScoreImage = Callable[[InstancePrediction, InstanceSample], ImageStats]
"""One image's prediction and ground truth -> the task's own ``ImageStats`` (masks, keypoints)."""


@torch.no_grad()
def evaluate_instances(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                       options: Any, score: ScoreImage, tag: str, half: bool = False,
                       progress: bool = True, losses: LossMeter | None = None,
                       kind: InstanceKind | None = None, artefacts: InstanceArtefacts | None = None,
                       score_on_device: bool = False) -> InstanceResult:
    """Box and ``tag`` (mask / pose) mAP of ``forward`` over ``pipeline``'s split; the same result
    on every rank. ``losses``: also average the family's loss over the batches, whose ground
    truth becomes training's targets for ``kind`` (the pipeline's ``InstanceKind``).
    ``score_on_device``: ``score`` takes each prediction where the network left it (segment's mask
    IoU runs on the GPU) rather than its host copy."""
    if losses is not None and kind is None:
        raise TypeError("validation losses of an instance task need the pipeline's kind (kind=pipeline.kind)")
    env = libreyolo_ddp.dist_env()
    metrics = InstanceMetrics(model.nc, model.names, tag)
    started = time.perf_counter()
    for number, batch in enumerate(tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0)):
        images = batch.images.half() if half else batch.images
        predictions = model.family.postprocess(forward(images), options)
        if losses is not None and kind is not None:
            losses.update(images, training_targets(batch.targets, int(images.shape[-1]), kind))
        host = [prediction.to("cpu") for prediction in predictions]
        if artefacts is not None:
            artefacts.batch_pictures(number, batch.targets, host)
        for prediction, on_device, sample in zip(host, predictions, batch.targets):
            det = prediction.det.float()
            box = match_image(det[:, :4], det[:, 4], det[:, 5].long(), sample.boxes, sample.classes,
                              image_id=sample.index)
            metrics.update(box, score(on_device if score_on_device else prediction, sample))
            if artefacts is not None:
                artefacts.update(prediction, sample, int(images.shape[-1]))
    result = metrics.compute()
    if artefacts is not None:
        artefacts.finish(metrics.merged)
    if losses is not None:
        result = dataclasses.replace(result, losses=losses.result())
    log.debug("validation of %d images in %.1f s", result.n_images, time.perf_counter() - started)
    return result
