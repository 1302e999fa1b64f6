"""Depth validation: each picture read and sized as predict reads it, its depth map scored
(``metrics``) at the picture's resolution. Pictures are sharded over ranks and the sums added."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
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
from .dataset import DepthSplit
from .metrics import DepthResult, score_depth, total
from .resize import depth_to_picture, network_size, resize_picture

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)


@dataclass
class DepthBatch:
    """``images``: ``[B, 3, h, w]`` on the device (predict's input); per picture its
    ``((H, W), (h, w))`` sizes and its ground-truth depth (metres, NaN unmeasured); ``max_depth``:
    the evaluated range's far end (the fitted disparity's floor)."""

    images: Tensor
    infos: list[tuple[tuple[int, int], tuple[int, int]]]
    depths: list[np.ndarray]
    max_depth: float


class DepthValPipeline:
    """This rank's share of a split's pictures, ``batch_size`` at a time."""

    def __init__(self, split: DepthSplit, *, imgsz: int, batch_size: int, device: torch.device) -> None:
        env = libreyolo_ddp.dist_env()
        self.split, self.imgsz, self.batch_size, self.device = split, imgsz, max(1, batch_size), device
        self.items = list(range(env.rank, len(split), env.world_size))

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self) -> Iterator[DepthBatch]:
        for lo in range(0, len(self.items), self.batch_size):
            chosen = self.items[lo:lo + self.batch_size]
            pictures = [torch.from_numpy(np.require(read_image(self.split.images[i]), requirements=("C", "W")))
                        for i in chosen]
            images, infos = padded_batch(pictures, self.imgsz, torch.float32, self.device,
                                         network_size=network_size, resize=resize_picture)
            yield DepthBatch(images, infos, [self.split.read_depth(i) for i in chosen], self.split.max_depth)


@torch.no_grad()
def evaluate_depth(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[DepthBatch], *,
                   half: bool = False, progress: bool = True) -> DepthResult:
    """Scale-and-shift aligned AbsRel and delta1 of the model over ``pipeline`` (the same on every rank)."""
    env = libreyolo_ddp.dist_env()
    sums = np.zeros(3, dtype=np.float64)
    n_images = 0
    started = time.perf_counter()
    for batch in tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0):
        outputs = model.family.postprocess(forward(batch.images.half() if half else batch.images), None)
        for prediction, (picture, (nh, nw)), truth in zip(outputs, batch.infos, batch.depths, strict=True):
            n_images += 1
            pred = depth_to_picture(prediction[:nh, :nw], picture).float().cpu().numpy()
            scored = score_depth(pred, truth, batch.max_depth)
            if scored is not None:
                sums += (scored[0], scored[1], 1.0)
    summed, n_images = sum_over_ranks(torch.from_numpy(sums), n_images)
    sums = summed.numpy()
    log.debug("depth validation of %d images in %.1f s", n_images, time.perf_counter() - started)
    return total(sums, n_images)
