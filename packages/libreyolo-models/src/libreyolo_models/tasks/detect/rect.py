"""Rectangular batches (``rect=True``): images of similar aspect ratio batched together, each
letterboxed onto the smallest stride-multiple rectangle that holds it (long side ``S``) instead
of an ``S x S`` square, and the batch padded to its largest rectangle at the bottom and right.

A 16:9 picture at 640 then runs at 640 x 384 instead of 640 x 640: 40 % fewer pixels, and less
grey for the network to look at. The mapping back to the original pixels is the square
letterbox's (the cache's resize ratio; the pad is where the image sits on its own rectangle),
and the bottom/right padding of the batch moves nothing.

- ``RectSamples``: the split in aspect-ratio order (``rect_order``), one letterboxed sample each.
- ``collate_rect``: pads a batch to its largest rectangle; targets renormalised to it.
- ``RectValPipeline`` / ``RectTrainPipeline``: validation in that order (sharded over ranks by
  range, like the square pipeline), and training whose batches keep their members and come in
  a seeded random order each epoch, with left-right flips as the only augmentation (mosaic and
  the affine warp would make the batches square again).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

import libreyolo_ddp

from ...data.collate import ImageBatch, Sample
from ...data.image_cache import CacheSetting, ImageCache, open_image_cache, usable_part
from ...data.letterbox import FILL, to_network_input
from ...data.loading import shuffle_seed
from ...data.split_index import SplitIndex
from ...errors import ConfigError
from .pipeline import Batch

log = logging.getLogger(__name__)


def rect_order(hw: np.ndarray) -> np.ndarray:
    """Indices of images sorted by aspect ratio ``h / w`` (stable: ties keep the split's order)."""
    hw = np.asarray(hw, dtype=np.float64).reshape(-1, 2)
    return np.argsort(hw[:, 0] / np.maximum(hw[:, 1], 1.0), kind="stable")


def rect_shape(h: int, w: int, stride: int) -> tuple[int, int]:
    """The smallest stride-multiple ``(H, W)`` holding an ``h x w`` image."""
    return math.ceil(h / stride) * stride, math.ceil(w / stride) * stride


class RectSamples(Dataset):
    """One letterboxed sample per cached image, in aspect order; ``flip_p`` and ``state`` (the
    shared ``[epoch]``) give training's seeded left-right flips."""

    def __init__(self, cache: ImageCache, index: SplitIndex, stride: int, *, flip_p: float = 0.0, seed: int = 0,
                 state: Tensor | None = None) -> None:
        self.cache, self.labels, self.stride = cache, index.labels, stride
        self.paths = [str(p) for p in index.images]
        self.order = rect_order(cache.hw)
        self.flip_p, self.seed, self.state = flip_p, seed, state

    def __len__(self) -> int:
        return len(self.order)

    def shape(self, i: int) -> tuple[int, int]:
        h, w = (int(v) for v in self.cache.hw[self.order[i]])
        return rect_shape(h, w, self.stride)

    def __getitem__(self, i: int) -> Sample:
        j = int(self.order[i])
        size = self.cache.imgsz
        tile = np.empty((size, size, 3), dtype=np.uint8)
        self.cache.read_into(j, tile)
        h, w = (int(v) for v in self.cache.hw[j])
        big_h, big_w = rect_shape(h, w, self.stride)
        left, top = (big_w - w) // 2, (big_h - h) // 2
        canvas = np.full((big_h, big_w, 3), FILL, dtype=np.uint8)
        canvas[top:top + h, left:left + w] = tile[:h, :w]
        rows = np.asarray(self.labels[j], dtype=np.float64).reshape(-1, 5).copy()
        rows[:, 1] = (rows[:, 1] * w + left) / big_w
        rows[:, 2] = (rows[:, 2] * h + top) / big_h
        rows[:, 3] *= w / big_w
        rows[:, 4] *= h / big_h
        if self.flip_p > 0 and self._draw(j) < self.flip_p:
            canvas = canvas[:, ::-1]
            rows[:, 1] = 1.0 - rows[:, 1]
            left = big_w - w - left
        image = torch.from_numpy(np.ascontiguousarray(canvas)).permute(2, 0, 1).contiguous()
        ori = tuple(int(v) for v in self.cache.ori_hw[j])
        return Sample(image=image, targets=torch.from_numpy(rows).float(), path=self.paths[j],
                      ori_size=ori, ratio_pad=(size / max(ori), (left, top)))  # type: ignore[arg-type]

    def _draw(self, j: int) -> float:
        epoch = int(self.state[0]) if self.state is not None else 0
        return float(np.random.default_rng([self.seed, epoch, j]).random())


def collate_rect(samples: Sequence[Sample]) -> ImageBatch:
    """Pad every sample to the batch's largest ``(H, W)`` (bottom and right: the mapping back is
    unchanged) and renormalise the targets to it; column 0 of the targets is the batch index."""
    big_h = max(int(s.image.shape[1]) for s in samples)
    big_w = max(int(s.image.shape[2]) for s in samples)
    images = torch.full((len(samples), 3, big_h, big_w), FILL, dtype=torch.uint8)
    rows = []
    for i, s in enumerate(samples):
        h, w = int(s.image.shape[1]), int(s.image.shape[2])
        images[i, :, :h, :w] = s.image
        t = s.targets.clone()
        t[:, [0 + 1, 2 + 1]] *= torch.tensor([w / big_w, w / big_w])   # cx, w
        t[:, [1 + 1, 3 + 1]] *= torch.tensor([h / big_h, h / big_h])   # cy, h
        rows.append(torch.cat((torch.full((len(t), 1), float(i)), t), dim=1))
    ratio_pad = [s.ratio_pad for s in samples]
    return ImageBatch(images=images, targets=torch.cat(rows) if rows else torch.zeros(0, 6),
                      paths=[s.path for s in samples], ori_sizes=[s.ori_size for s in samples],
                      ratio_pad=None if any(r is None for r in ratio_pad) else ratio_pad)  # type: ignore[arg-type]


class RectValPipeline:
    """Validation batches in aspect-ratio order, each at its own rectangle (``ValPipeline``'s
    contract otherwise: every image once over all ranks, no augmentation)."""

    def __init__(self, index: SplitIndex, *, imgsz: int, stride: int, batch_size: int, device: torch.device | str,
                 workers: int, cache: CacheSetting = "auto") -> None:
        self.device = torch.device(device)
        self.imgsz = imgsz
        cached = open_image_cache(index.images, imgsz, mode=cache)
        index, self.cache, self.skipped = usable_part(index, cached)
        self.samples = RectSamples(self.cache, index, stride)
        self._loader = libreyolo_ddp.build_dataloader(
            self.samples, batch_size=batch_size, shuffle=False, workers=workers, seed=0, collate_fn=collate_rect,
            drop_last=False, pin_memory=self.device.type == "cuda", shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Batch]:
        for batch in self._loader:
            yield Batch(to_network_input(batch.images.to(self.device, non_blocking=True)), batch.targets,
                        batch.paths, batch.ori_sizes, batch.ratio_pad)


class _EpochBatches:
    """The loader's batch sampler: this rank's batches of the current epoch (``set_epoch``)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(list(self.batches))


class RectTrainPipeline:
    """Training batches of fixed members (consecutive in aspect order), in a seeded random order
    per epoch (the same on every rank, each rank taking every ``world``-th), ``fliplr`` flips; the
    last partial batch is dropped and every rank steps alike."""

    def __init__(self, index: SplitIndex, *, imgsz: int, stride: int, batch_size: int, device: torch.device | str,
                 workers: int, seed: int, fliplr: float, cache: CacheSetting = "auto") -> None:
        self.device = torch.device(device)
        cached = open_image_cache(index.images, imgsz, mode=cache)
        index, self.cache, self.skipped = usable_part(index, cached)
        self._state = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.samples = RectSamples(self.cache, index, stride, flip_p=fliplr, seed=seed, state=self._state)
        env = libreyolo_ddp.dist_env()
        self._seed, self._rank, self._world = seed, env.rank, max(1, env.world_size)
        n_batches = len(self.samples) // batch_size
        self._batches = [list(range(b * batch_size, (b + 1) * batch_size)) for b in range(n_batches)]
        self._per_rank = n_batches // self._world
        if self._per_rank == 0:
            raise ConfigError(f"rect=True: the {index.name or 'training'} split has {len(index)} images, fewer than "
                              f"one batch of {batch_size} on each of {self._world} rank(s); lower batch")
        self._sampler = _EpochBatches()
        self._loader = DataLoader(self.samples, batch_sampler=self._sampler, num_workers=workers,
                                  collate_fn=collate_rect, pin_memory=self.device.type == "cuda")
        log.info("train pipeline: %d images at %d px in rectangular batches of %d (no mosaic), %d workers",
                 len(self.samples), imgsz, batch_size, workers)
        self.set_epoch(0, mosaic=False)

    def set_epoch(self, epoch: int, *, mosaic: bool) -> None:
        """Reshuffle the batch order for ``epoch`` (``mosaic`` is ignored: rectangular batches have none)."""
        self._state[0] = epoch
        rng = np.random.default_rng(shuffle_seed(self._seed, 0, epoch))
        order = rng.permutation(len(self._batches))[: self._per_rank * self._world]
        self._sampler.batches = [self._batches[b] for b in order[self._rank::self._world]]

    def __len__(self) -> int:
        return self._per_rank

    def __iter__(self) -> Iterator[Batch]:
        for batch in self._loader:
            images = batch.images.to(self.device, non_blocking=True).float().div_(255)
            yield Batch(images, batch.targets, batch.paths, batch.ori_sizes)

    def close(self) -> None:
        """Nothing resident to free (what the trainer calls at the end of a run)."""
