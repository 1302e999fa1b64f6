"""Training and validation batches of a semantic split (images and masks together).

Training mirrors detection's ``pipeline``: images come from the decode-once ``ImageCache`` (long
side ``S``), each mask is decoded in a worker and resized by nearest neighbour to its cached
image. Two paths share one set of draws and one render function (``mask_augment``):

- CPU path (``gpu_augment=False``; the default off CUDA): workers render one sample each and ship
  ``uint8`` images and masks;
- GPU path (``gpu_augment=True``; the default on CUDA): workers ship cached slots, masks and draws;
  the main process renders the whole batch on the device, one batch ahead on a side stream.

Validation letterboxes each image with predict's own ``letterbox_batch`` (so it measures exactly
the pixels ``predict`` sees on the CPU; on a GPU predict resizes there, within one grey level) and keeps each mask at its original size: metrics are computed on the
predicted map carried back to the original image, as ``Results.masks`` holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset, RandomSampler

import libreyolo_ddp

from ...data.augment_draws import AugmentConfig
from ...data.collate import batch_tensor, pass_through
from ...data.image_cache import CacheSetting, ImageCache, cache_failures, open_image_cache
from ...data.image_files import read_image
from ...data.letterbox_images import LetterboxInfo, letterbox_batch
from ...data.loading import one_ahead_on_side_stream, resolve_gpu_augment, shuffle_seed, smaller_than_a_batch
from ...data.split_index import DataProblem
from ...errors import ConfigError, SourceError
from .augment import PARAMS, draw_mask_params, render_pairs
from .reader import MaskSplit, load_mask

log = logging.getLogger(__name__)


@dataclass
class MaskBatch:
    """A training batch on its device: ``images`` ``float32 [B, 3, S, S]`` RGB in [0, 1];
    ``targets`` ``uint8 [B, S, S]`` class ids (255: ignore); ``paths`` the image files."""

    images: Tensor
    targets: Tensor
    paths: list[str]

    def pin_memory(self) -> MaskBatch:
        return replace(self, images=self.images.pin_memory(), targets=self.targets.pin_memory())


@dataclass
class PairSlots:
    """GPU path: what a worker ships for a batch (rendered on the device).

    ``slots`` ``uint8 [B, S, S, 3]`` cached images (top-left ``hw``), ``masks`` ``uint8 [B, S, S]``
    laid out alike, ``hw`` ``int64 [B, 2]``, ``params`` ``float64 [B, PARAMS]`` (stay on the CPU).
    """

    slots: Tensor
    masks: Tensor
    hw: Tensor
    params: Tensor
    paths: list[str]

    def pin_memory(self) -> PairSlots:
        return replace(self, slots=self.slots.pin_memory(), masks=self.masks.pin_memory())


@dataclass
class MaskValBatch:
    """A validation batch: letterboxed ``images`` ``float32 [B, 3, S, S]`` on the device; per image
    its original mask (``targets``, ``uint8 [h, w]`` on the CPU), its ``LetterboxInfo`` and path."""

    images: Tensor
    targets: list[Tensor]
    infos: list[LetterboxInfo]
    paths: list[str]


class _Pairs(Dataset):
    """A checked split over the image cache, plus what a worker needs to draw any sample's augmentation."""

    def __init__(self, cache: ImageCache, split: MaskSplit, augment: AugmentConfig, *, seed: int, rank: int,
                 state: Tensor) -> None:
        self.cache, self.augment, self.seed, self.rank, self.state = cache, augment, seed, rank, state
        self.masks = list(split.masks)
        self.paths = [str(p) for p in split.images]

    def __len__(self) -> int:
        return len(self.paths)

    def read_into(self, index: int, slot: np.ndarray, mask_slot: np.ndarray) -> tuple[int, int]:
        """Image ``index`` into ``slot`` and its mask, resized to the cached size, into ``mask_slot``."""
        self.cache.read_into(index, slot)
        h, w = (int(v) for v in self.cache.hw[index])
        mask = load_mask(self.masks[index])
        if mask.shape != (h, w):
            mask = np.asarray(Image.fromarray(mask).resize((w, h), Image.Resampling.NEAREST))
        mask_slot[:h, :w] = mask
        return h, w

    def params(self, index: int) -> np.ndarray:
        return draw_mask_params(self.augment, index=index, seed=self.seed, rank=self.rank, epoch=int(self.state[0]))

    def gather(self, indices: Sequence[int], *, shared: bool | None = None) -> PairSlots:
        size = self.cache.imgsz
        n = len(indices)
        slots = batch_tensor((n, size, size, 3), torch.uint8, shared=shared)
        masks = batch_tensor((n, size, size), torch.uint8, shared=shared)
        hw = torch.empty((n, 2), dtype=torch.int64)
        params = torch.empty((n, PARAMS), dtype=torch.float64)
        for j, i in enumerate(indices):
            hw[j] = torch.tensor(self.read_into(int(i), slots[j].numpy(), masks[j].numpy()))
            params[j] = torch.from_numpy(self.params(int(i)))
        return PairSlots(slots, masks, hw, params, [self.paths[int(i)] for i in indices])


class _RenderedPairs(_Pairs):
    """CPU path: one augmented sample per index, rendered in the worker."""

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, str]:
        raw = self.gather([index], shared=False)
        image, mask = render_pairs(raw.slots, raw.masks, raw.hw, raw.params, self.cache.imgsz)
        return image[0].round_().clamp_(0, 255).to(torch.uint8), mask[0], raw.paths[0]


class _RawPairs(_Pairs):
    """GPU path: a whole batch of cached slots, masks and draws per ``__getitems__`` call."""

    def __getitems__(self, indices: Sequence[int]) -> PairSlots:
        return self.gather(indices)

    def __getitem__(self, index: int) -> PairSlots:
        return self.gather([index])


def _collate_rendered(samples: Sequence[tuple[Tensor, Tensor, str]]) -> MaskBatch:
    images = batch_tensor((len(samples), *samples[0][0].shape), torch.uint8)
    masks = batch_tensor((len(samples), *samples[0][1].shape), torch.uint8)
    torch.stack([s[0] for s in samples], out=images)
    torch.stack([s[1] for s in samples], out=masks)
    return MaskBatch(images, masks, [s[2] for s in samples])


class MaskTrainPipeline:
    """Augmented (image, mask) batches for one rank; call :meth:`set_epoch` before each epoch.

    Args:
        split: the checked training split.
        imgsz: output side ``S``; batch_size: images per batch on this rank; device: where batches go.
        augment: the settings (``mask_augment.SEMANTIC_AUGMENTATIONS`` are read).
        workers: DataLoader workers; seed: draws are seeded by (seed, rank, epoch, index).
        gpu_augment: render batches on ``device`` (True), per sample in workers (False), or
            ``"auto"`` (True on CUDA). cache, cache_dir: where decoded images live.

    Raises:
        ConfigError: fewer images than one batch per rank, or a bad seed.
    """

    def __init__(self, split: MaskSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 augment: AugmentConfig, workers: int, seed: int, gpu_augment: bool | Literal["auto"] = "auto",
                 cache: CacheSetting = "auto", cache_dir: Path | None = None) -> None:
        self.device = torch.device(device)
        self.gpu_augment = resolve_gpu_augment(gpu_augment, self.device)
        self.imgsz = imgsz
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be a non-negative integer (e.g. seed=0)")
        self.cache = open_image_cache(split.images, imgsz, mode=cache, cache_dir=cache_dir)
        split, self.cache, self.skipped = usable_pairs(split, self.cache)
        env = libreyolo_ddp.dist_env()
        self._seed, self._rank = seed, env.rank
        self._state = torch.tensor([0], dtype=torch.int64).share_memory_()
        kind = _RawPairs if self.gpu_augment else _RenderedPairs
        dataset = kind(self.cache, split, augment, seed=seed, rank=env.rank, state=self._state)
        self._shuffle = torch.Generator()
        self._shuffle.manual_seed(shuffle_seed(seed, env.rank, 0))
        distributed = libreyolo_ddp.is_dist_initialized() and env.world_size > 1
        self._loader = libreyolo_ddp.build_dataloader(
            dataset, batch_size=batch_size, shuffle=True, workers=workers, seed=seed,
            collate_fn=pass_through if self.gpu_augment else _collate_rendered, drop_last=True,
            pin_memory=self.device.type == "cuda",
            sampler=None if distributed else RandomSampler(dataset, generator=self._shuffle))
        if len(self._loader) == 0:
            raise smaller_than_a_batch(split.name or "training", len(split), batch_size, env.world_size,
                                       getattr(split, "problems", ()))
        log.info("train pipeline: %d image+mask pairs at %d px, batch %d, %d workers, augmentation %s",
                 len(split), imgsz, batch_size, workers, "on the device" if self.gpu_augment else "in workers")

    def set_epoch(self, epoch: int, *, mosaic: bool = False) -> None:
        """Reseed the shuffle and the draws for ``epoch`` (``mosaic`` has no meaning here)."""
        if epoch < 0:
            raise ConfigError(f"epoch={epoch} must be >= 0")
        self._state.fill_(epoch)
        self._shuffle.manual_seed(shuffle_seed(self._seed, self._rank, epoch))
        libreyolo_ddp.set_loader_epoch(self._loader, epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[MaskBatch]:
        if not self.gpu_augment:
            return map(self._upload, self._loader)
        if self.device.type == "cuda":
            return self._masks_used_here(one_ahead_on_side_stream(self._loader, self._render,
                                                                   self.device))
        return map(self._render, self._loader)

    def _masks_used_here(self, batches: Iterator[MaskBatch]) -> Iterator[MaskBatch]:
        """The side stream made the masks too: tell the allocator the caller's stream uses them
        (the shared hand-over already does this for the images)."""
        for batch in batches:
            batch.targets.record_stream(torch.cuda.current_stream(self.device))
            yield batch

    def _upload(self, batch: MaskBatch) -> MaskBatch:
        images = batch.images.to(self.device, non_blocking=True).float().div_(255)
        return MaskBatch(images, batch.targets.to(self.device, non_blocking=True), batch.paths)

    def _render(self, batch: PairSlots) -> MaskBatch:
        with torch.no_grad():
            slots = batch.slots.to(self.device, non_blocking=True)
            masks = batch.masks.to(self.device, non_blocking=True)
            images, labels = render_pairs(slots, masks, batch.hw, batch.params, self.imgsz)
        return MaskBatch(images.div_(255), labels, batch.paths)


def usable_pairs(split: MaskSplit, cache: ImageCache) -> tuple[MaskSplit, ImageCache, list[DataProblem]]:
    """Leave out the pairs whose image the cache could not decode (changed after the check).

    One warning each; the epoch summary counts them (``skipped``). Only a split with nothing left
    is an error (``EmptySplitError``). The split's pixel counts are the check's, bad pairs included.
    """
    if not cache.failed:
        return split, cache, []
    problems, keep = cache_failures(split.name, split.images, cache)
    smaller = replace(split, images=[split.images[i] for i in keep], masks=[split.masks[i] for i in keep],
                      sizes=[split.sizes[i] for i in keep], problems=[*split.problems, *problems])
    return smaller, cache.without(sorted(cache.failed)), problems


class _LetterboxedPairs(Dataset):
    """Validation: each image letterboxed exactly as predict does, with its original mask.

    A pair that no longer reads (changed after the dataset check) is left out with a warning
    naming it (``None``, dropped by the collate), so one file never stops a run.
    """

    def __init__(self, split: MaskSplit, imgsz: int) -> None:
        self.images, self.masks, self.imgsz = list(split.images), list(split.masks), imgsz

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, LetterboxInfo, str] | None:
        try:
            pixels = torch.from_numpy(np.require(read_image(self.images[index]), requirements=("C", "W")))  # PIL's arrays are read-only
            images, (info,) = letterbox_batch([pixels], self.imgsz)
            mask = torch.from_numpy(load_mask(self.masks[index]))
        except (SourceError, OSError, ValueError, SyntaxError) as err:
            log.warning("val: skipped %s: %s (was the file changed after the dataset check?)", self.images[index],
                        getattr(err, "reason", None) or err)
            return None
        return images[0], mask, info, str(self.images[index])


def _collate_val(found: Sequence[tuple[Tensor, Tensor, LetterboxInfo, str] | None]) -> MaskValBatch | None:
    samples = [s for s in found if s is not None]
    if not samples:
        return None
    images = batch_tensor((len(samples), *samples[0][0].shape), torch.float32)
    torch.stack([s[0] for s in samples], out=images)
    return MaskValBatch(images, [s[1] for s in samples], [s[2] for s in samples], [s[3] for s in samples])


class MaskValPipeline:
    """Letterboxed validation batches with original-size masks, fixed order, each image once over all ranks."""

    def __init__(self, split: MaskSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 workers: int) -> None:
        self.device = torch.device(device)
        self._loader = libreyolo_ddp.build_dataloader(
            _LetterboxedPairs(split, imgsz), batch_size=batch_size, shuffle=False, workers=workers, seed=0,
            collate_fn=_collate_val, drop_last=False, pin_memory=False, shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[MaskValBatch]:
        for batch in self._loader:
            if batch is not None:  # None: every pair of the batch was skipped (named in warnings)
                yield replace(batch, images=batch.images.to(self.device, non_blocking=True))
