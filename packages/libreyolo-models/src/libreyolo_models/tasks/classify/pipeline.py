"""Classification batches: decode-once caches, the two augmentation paths, and evaluation crops.

Training reads a cache whose long side is ``train_cache_side(imgsz)`` (decoded once per host,
shared by workers and ranks: ``image_cache``) and augments each sample from its draws
(``classify_augment``), either per sample in DataLoader workers (CPU path, uint8 out) or as a
whole batch on the device (GPU path: workers ship slots and draws, the main process renders on
a side stream one batch ahead); both call ``classify_ops.render_crops``. Mixup and CutMix run on
the device, on the whole batch, in both paths. Validation reads a cache of evaluation crops made
by ``classify_ops.centre_crop``, the function predict calls, so it measures predict's pixels.

Training batches carry soft targets ``float32 [B, nc]`` on the device; validation batches carry
class ids ``int64 [B]`` on the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, RandomSampler

import libreyolo_ddp

from ...data.collate import batch_tensor, pass_through
from ...data.decode import read_image_file
from ...data.image_cache import CacheSetting, ImageCache, open_image_cache
from ...data.loading import one_ahead_on_side_stream, resolve_gpu_augment, shuffle_seed, smaller_than_a_batch
from ...errors import ConfigError
from .augment import RANDAUGMENT_N_OPS, ClassifyAugment, CropDraws, draw_crop, draw_mix
from .folder_reader import ClassSplit
from .ops import centre_crop, mix_batch, render_crops, train_cache_side

log = logging.getLogger(__name__)


@dataclass
class ClassifyBatch:
    """One batch on its device.

    Attributes:
        images: ``float32 [B, 3, S, S]`` RGB in [0, 1].
        targets: training: ``float32 [B, nc]`` soft targets on the device (rows sum to 1);
            validation: ``int64 [B]`` class ids on the CPU.
        paths: image files.
    """

    images: Tensor
    targets: Tensor
    paths: list[str]


@dataclass
class _Crops:
    """What a worker ships: uint8 images (CPU path) or raw slots and draws (GPU path)."""

    images: Tensor                  # uint8 [B, 3, S, S] rendered, or uint8 [B, L, L, 3] slots
    labels: Tensor                  # int64 [B]
    paths: list[str]
    draws: tuple[Tensor, ...] = ()  # GPU path: boxes, flip, jitter, ops, signs

    def pin_memory(self) -> _Crops:
        return _Crops(self.images.pin_memory(), self.labels.pin_memory(), self.paths,
                      tuple(t.pin_memory() for t in self.draws))


def _draw_tensors(draws: Sequence[CropDraws]) -> tuple[Tensor, ...]:
    return (torch.tensor([d.box for d in draws], dtype=torch.float32),
            torch.tensor([d.flip for d in draws], dtype=torch.bool),
            torch.tensor([d.jitter for d in draws], dtype=torch.float32),
            torch.tensor([d.ops for d in draws], dtype=torch.int64).view(-1, RANDAUGMENT_N_OPS),
            torch.tensor([d.signs for d in draws], dtype=torch.float32).view(-1, RANDAUGMENT_N_OPS))


class _TrainCrops(Dataset):
    """CPU path: one rendered uint8 sample per ``__getitem__``, made in a worker."""

    render = True

    def __init__(self, cache: ImageCache, split: ClassSplit, augment: ClassifyAugment, *, imgsz: int, seed: int,
                 rank: int, state: Tensor) -> None:
        self.cache, self.augment, self.imgsz, self.seed, self.rank = cache, augment, imgsz, seed, rank
        self.labels = split.labels
        self.paths = [str(p) for p in split.images]
        self.state = state  # shared memory: [epoch], written by set_epoch, read here

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> _Crops:
        return self.crops([index])

    def crops(self, indices: Sequence[int]) -> _Crops:
        epoch = int(self.state[0])
        draws = [draw_crop(self.augment, index=int(i), hw=tuple(int(v) for v in self.cache.hw[int(i)]),  # type: ignore[arg-type]
                           seed=self.seed, rank=self.rank, epoch=epoch) for i in indices]
        side = self.cache.imgsz
        # Rendered here (CPU path), the slots never leave the worker; shipped (GPU path), they go
        # through shared memory.
        slots = batch_tensor((len(draws), side, side, 3), torch.uint8, shared=False if self.render else None)
        for row, d in enumerate(draws):
            _read_with_edge(self.cache, d.index, slots[row].numpy())
        labels = torch.from_numpy(self.labels[[d.index for d in draws]])
        paths = [self.paths[d.index] for d in draws]
        tensors = _draw_tensors(draws)
        if not self.render:
            return _Crops(slots, labels, paths, tensors)
        pixels = render_crops(slots, *tensors, imgsz=self.imgsz, magnitude=self.augment.randaugment)
        images = batch_tensor(pixels.shape, torch.uint8)
        images.copy_(pixels.round_())
        return _Crops(images, labels, paths)


def _read_with_edge(cache: ImageCache, index: int, out: np.ndarray) -> None:
    """Image ``index`` into its slot plus a copy of its last column and row beyond them: the crop's
    bilinear samples reach half a pixel past the image edge, which must read the edge, not
    whatever the (uninitialised) rest of the slot holds."""
    cache.read_into(index, out)
    h, w = (int(v) for v in cache.hw[index])
    if w < out.shape[1]:
        out[:h, w] = out[:h, w - 1]
    if h < out.shape[0]:
        out[h, :w + 1] = out[h - 1, :w + 1]


class _TrainSlots(_TrainCrops):
    """GPU path: a whole batch of cached slots and draws per ``__getitems__`` call."""

    render = False

    def __getitems__(self, indices: Sequence[int]) -> _Crops:
        return self.crops(indices)


def _merge(parts: list[_Crops]) -> _Crops:
    """Collate the CPU path's one-sample batches."""
    images = batch_tensor((len(parts), *parts[0].images.shape[1:]), torch.uint8)
    torch.cat([p.images for p in parts], out=images)
    return _Crops(images, torch.cat([p.labels for p in parts]), [q for p in parts for q in p.paths])


class ClassifyTrainPipeline:
    """Augmented classification batches for one rank; call ``set_epoch`` before each epoch.

    Args mirror ``pipeline.TrainPipeline``; ``label_smoothing`` moves that share of each target's
    mass evenly onto all classes.

    Raises:
        ConfigError: a bad argument, or fewer images than one batch per rank.
        ImageCacheError: images cannot be decoded or cached.
    """

    def __init__(self, split: ClassSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 augment: ClassifyAugment, workers: int, seed: int,
                 gpu_augment: bool | Literal["auto"] = "auto", cache: CacheSetting = "auto",
                 cache_dir: Path | None = None, label_smoothing: float = 0.0) -> None:
        self.device = torch.device(device)
        self.gpu_augment = resolve_gpu_augment(gpu_augment, self.device)
        self.label_smoothing = label_smoothing
        self.imgsz, self.nc, self.augment, self._seed = imgsz, split.nc, augment, seed
        self.cache = open_image_cache(split.images, train_cache_side(imgsz), mode=cache, cache_dir=cache_dir)
        env = libreyolo_ddp.dist_env()
        self._rank = env.rank
        self._state = torch.zeros(1, dtype=torch.int64).share_memory_()
        kind = _TrainSlots if self.gpu_augment else _TrainCrops
        dataset = kind(self.cache, split, augment, imgsz=imgsz, seed=seed, rank=env.rank, state=self._state)
        self._shuffle = torch.Generator()
        self._shuffle.manual_seed(shuffle_seed(seed, env.rank, 0))
        self._mix_rng = _mix_rng(seed, env.rank, 0)
        distributed = libreyolo_ddp.is_dist_initialized() and env.world_size > 1
        self._loader = libreyolo_ddp.build_dataloader(
            dataset, batch_size=batch_size, shuffle=True, workers=workers, seed=seed,
            collate_fn=pass_through if self.gpu_augment else _merge, drop_last=True,
            pin_memory=self.device.type == "cuda",
            sampler=None if distributed else RandomSampler(dataset, generator=self._shuffle))
        if len(self._loader) == 0:
            raise smaller_than_a_batch("training", len(split), batch_size, env.world_size,
                                       getattr(split, "problems", ()))
        log.info("train pipeline: %d images, crops of %d px from a %d px cache, batch %d, %d workers, "
                 "augmentation %s", len(split), imgsz, self.cache.imgsz, batch_size, workers,
                 f"batched on {self.device}" if self.gpu_augment else "per sample in workers")

    def set_epoch(self, epoch: int, *, mosaic: bool = False) -> None:
        """Start ``epoch``: reshuffle and reseed the draws (``mosaic`` is detection's; ignored)."""
        if epoch < 0:
            raise ConfigError(f"epoch={epoch} must be >= 0")
        self._state.fill_(epoch)
        self._shuffle.manual_seed(shuffle_seed(self._seed, self._rank, epoch))
        self._mix_rng = _mix_rng(self._seed, self._rank, epoch)
        libreyolo_ddp.set_loader_epoch(self._loader, epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[ClassifyBatch]:
        if self.gpu_augment and self.device.type == "cuda":
            return one_ahead_on_side_stream(self._loader, self._finish, self.device)
        return map(self._finish, self._loader)

    def _finish(self, crops: _Crops) -> ClassifyBatch:
        with torch.no_grad():
            if self.gpu_augment:
                moved = [t.to(self.device, non_blocking=True) for t in (crops.images, *crops.draws)]
                images = render_crops(*moved, imgsz=self.imgsz, magnitude=self.augment.randaugment)
            else:
                images = crops.images.to(self.device, non_blocking=True).float()
            images = images.div_(255)
            mix = draw_mix(self.augment, self._mix_rng, self.imgsz) if self.augment.mixes else None
            images, targets = mix_batch(images, crops.labels.to(self.device, non_blocking=True), self.nc, mix)
            if self.label_smoothing:
                targets = targets * (1.0 - self.label_smoothing) + self.label_smoothing / self.nc
        return ClassifyBatch(images, targets, crops.paths)


def _mix_rng(seed: int, rank: int, epoch: int) -> np.random.Generator:
    """Mixup/CutMix draws of one epoch on one rank, batch after batch (apart from the samples' streams)."""
    return np.random.default_rng(np.random.SeedSequence([seed, rank, epoch, 1 << 30]))


def eval_decode(path: Path, imgsz: int) -> tuple[np.ndarray, tuple[int, int]]:
    """The validation cache's decoder: the file's evaluation crop (``centre_crop``), as predict makes it."""
    image, _ = read_image_file(path)
    return centre_crop(image, imgsz), (int(image.shape[0]), int(image.shape[1]))


class _EvalCrops(Dataset):
    def __init__(self, cache: ImageCache, split: ClassSplit) -> None:
        self.cache, self.labels, self.paths = cache, split.labels, [str(p) for p in split.images]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> _Crops:
        slot = self.cache.read(index)
        image = torch.from_numpy(slot).permute(2, 0, 1).contiguous()[None]
        return _Crops(image, torch.from_numpy(self.labels[index:index + 1]), [self.paths[index]])


class ClassifyValPipeline:
    """Evaluation crops in a fixed order, each image once over all ranks."""

    def __init__(self, split: ClassSplit, *, imgsz: int, batch_size: int, device: torch.device | str, workers: int,
                 cache: CacheSetting = "auto", cache_dir: Path | None = None) -> None:
        self.device = torch.device(device)
        self.cache = open_image_cache(split.images, imgsz, mode=cache, cache_dir=cache_dir, decode=eval_decode)
        self._loader = libreyolo_ddp.build_dataloader(
            _EvalCrops(self.cache, split), batch_size=batch_size, shuffle=False, workers=workers, seed=0,
            collate_fn=_merge, drop_last=False, pin_memory=self.device.type == "cuda", shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[ClassifyBatch]:
        for crops in self._loader:
            yield ClassifyBatch(crops.images.to(self.device, non_blocking=True).float().div_(255), crops.labels,
                                crops.paths)
