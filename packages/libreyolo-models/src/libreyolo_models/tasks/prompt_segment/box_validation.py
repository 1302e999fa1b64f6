"""Box-prompt validation (``box_metrics``) over an instance-segmentation split.

The pipeline reads each picture as predict reads a file (``data.image_files.read_image``) and
prepares it as predict does (``resize.square_input``), so the masks validation scores are the
masks ``predict(boxes=...)`` returns. Per batch the family's encoder runs once per picture; each
picture's boxes are then decoded together (at most ``PROMPT_CHUNK`` per decoder call) through the
family's ``predict_postprocess``, one mask each (``multimask_output=False``), at the picture's
size. The ground truth is rasterised at that size (``mask_shapes``: exact for RLE and polygons).
Images are sharded over ranks; the per-class sums are added over them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

import libreyolo_ddp

from ...contract.prompts import PromptImage, Prompts
from ...data.image_files import read_image
from ...errors import ConfigError
from ..instances.split import InstanceSplit
from ..rank_sums import sum_over_ranks
from .box_metrics import BoxPromptMetrics, BoxPromptResult, paired_iou
from .resize import square_input

if TYPE_CHECKING:
    from ..base import ModelView

log = logging.getLogger(__name__)

PROMPT_CHUNK = 64
"""Boxes decoded at once: bounds the memory of the full-size masks of a crowded picture."""


@dataclass
class BoxTargets:
    """One picture's objects. ``boxes``: ``float32 [n, 4]`` x1, y1, x2, y2 in its pixels (the
    prompts); ``classes``: ``int64 [n]``; ``masks``: each object's mask source (``rasterize(h, w)``);
    ``image``: the picture's geometry in the square input."""

    boxes: Tensor
    classes: Tensor
    masks: list[Any]
    image: PromptImage
    path: str


@dataclass
class BoxPromptBatch:
    """``images``: ``[B, 3, S, S]`` on the device (predict's input); ``targets``: one per picture."""

    images: Tensor
    targets: list[BoxTargets]


def pixel_boxes(rows: np.ndarray, size: tuple[int, int]) -> Tensor:
    """Label rows ``class, cx, cy, w, h`` (normalised) -> ``float32 [n, 4]`` corners in pixels."""
    h, w = size
    cx, cy, bw, bh = (rows[:, i].astype(np.float64) for i in range(1, 5))
    corners = np.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], axis=1)
    return torch.from_numpy(corners.reshape(-1, 4)).float()


class BoxPromptPipeline:
    """This rank's share of a split's pictures in batches of ``batch_size`` (see the module docstring)."""

    def __init__(self, split: InstanceSplit, *, imgsz: int, batch_size: int, device: torch.device) -> None:
        env = libreyolo_ddp.dist_env()
        self.split, self.imgsz, self.batch_size, self.device = split, imgsz, max(1, batch_size), device
        self.items = list(range(env.rank, len(split), env.world_size))
        self.names = dict(split.names)

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self) -> Iterator[BoxPromptBatch]:
        for lo in range(0, len(self.items), self.batch_size):
            inputs, targets = [], []
            for i in self.items[lo:lo + self.batch_size]:
                pixels = read_image(self.split.images[i])
                x, image = square_input(torch.from_numpy(np.ascontiguousarray(pixels)).to(self.device), self.imgsz,
                                        torch.float32)
                rows = self.split.labels[i]
                inputs.append(x)
                targets.append(BoxTargets(pixel_boxes(rows, image.orig_shape), torch.from_numpy(rows[:, 0]).long(),
                                          list(self.split.extras[i]), image, str(self.split.images[i])))
            yield BoxPromptBatch(torch.stack(inputs), targets)


def decode_boxes(model: ModelView, net: nn.Module, embedding: Tensor, target: BoxTargets) -> Tensor:
    """One picture's ``[1, C, h, w]`` embedding and its boxes -> ``bool [n, H, W]`` masks, the one
    mask per box that ``predict(boxes=..., multimask_output=False)`` returns."""
    out = []
    for lo in range(0, len(target.boxes), PROMPT_CHUNK):
        prompts = Prompts(boxes=target.boxes[lo:lo + PROMPT_CHUNK], multimask=False)
        prediction = model.family.predict_postprocess(net, embedding, prompts, [target.image])[0]
        out.append(prediction.masks[:, 0].cpu())
    return torch.cat(out)


@torch.no_grad()
def evaluate_box_prompts(model: ModelView, forward: Callable[[Tensor], Any], pipeline: Iterable[Any], *,
                         names: dict[int, str], half: bool = False, progress: bool = True) -> BoxPromptResult:
    """Box-prompt mIoU of the model over ``pipeline`` (the same result on every rank)."""
    net = getattr(model, "net", None)
    if not isinstance(net, nn.Module):
        raise ConfigError("prompt-segment validation decodes box prompts with the PyTorch network; this model has "
                          "none (an exported runtime): validate the .pt weights instead")
    env = libreyolo_ddp.dist_env()
    metrics = BoxPromptMetrics(names)
    started = time.perf_counter()
    for batch in tqdm(pipeline, desc="val", leave=False, disable=not progress or env.rank != 0):
        embeddings = forward(batch.images.half() if half else batch.images)
        for i, target in enumerate(batch.targets):
            if not len(target.boxes):
                metrics.update(torch.zeros(0, dtype=torch.float64), target.classes)
                continue
            pred = decode_boxes(model, net, embeddings[i:i + 1], target)
            h, w = target.image.orig_shape
            gt = torch.from_numpy(np.stack([np.asarray(m.rasterize(h, w), dtype=bool) for m in target.masks]))
            metrics.update(paired_iou(pred, gt), target.classes)
    sums, n_images = metrics.sums, metrics.n_images
    sums, n_images = sum_over_ranks(sums, n_images)
    log.debug("box-prompt validation of %d images in %.1f s", n_images, time.perf_counter() - started)
    return metrics.result(sums, n_images)
