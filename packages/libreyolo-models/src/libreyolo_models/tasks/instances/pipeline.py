"""Training and validation batches of an instance task (segment, pose).

Training: DataLoader workers render one sample each (``geometry.compose_sample``: mosaic, affine,
HSV, flip, with the draws of ``data.augment_draws``) and ship uint8 images plus targets; the main
process uploads the images and divides by 255. On every device this is detection's CPU path (the
batched GPU rendering of detection does not carry masks or keypoints yet). Validation letterboxes
each cached image, deterministically, sharded over ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor
from torch.utils.data import Dataset, RandomSampler

import libreyolo_ddp

from ...contract.instances import InstanceTargets
from ...data.augment_draws import AugmentConfig, draw_sample
from ...data.collate import batch_tensor
from ...data.image_cache import CacheSetting, ImageCache, open_image_cache
from ...data.letterbox import to_network_input, to_targets
from ...data.loading import shuffle_seed
from ...errors import ConfigError
from .geometry import InstanceSample, compose_sample, letterbox_draw, pool_masks
from .split import InstanceSplit, usable_instances

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceKind:
    """What an instance task carries besides boxes: ``masks`` (segment) or ``keypoints`` (pose,
    with the dataset's ``flip_idx`` and OKS ``sigmas``)."""

    masks: bool = False
    keypoints: bool = False
    flip_idx: tuple[int, ...] | None = None
    sigmas: tuple[float, ...] | None = None


@dataclass
class InstanceBatch:
    """A training batch: ``images`` ``float32 [B, 3, S, S]`` in [0, 1] on the device; ``targets``
    on the host (``contract.instances.InstanceTargets``); the images' files and original sizes."""

    images: Tensor
    targets: InstanceTargets
    paths: list[str]
    ori_sizes: list[tuple[int, int]]

    def pin_memory(self) -> InstanceBatch:
        return replace(self, images=self.images.pin_memory(), targets=self.targets.pin_memory())


@dataclass
class InstanceValBatch:
    """A validation batch: letterboxed ``images`` on the device and ``targets``, per image its
    ground truth in input pixels (an ``InstanceSample``: classes, boxes, masks or keypoints, the
    region the image covers)."""

    images: Tensor
    targets: list[InstanceSample]

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.targets]

    def pin_memory(self) -> InstanceValBatch:
        return replace(self, images=self.images.pin_memory())


def _train_item(sample: InstanceSample, size: int) -> InstanceSample:
    """What a training worker ships: boxes normalised (class, cx, cy, w, h) in ``boxes``, masks
    pooled to the target resolution, keypoints normalised."""
    rows = to_targets(torch.zeros(len(sample.classes)), sample.classes, sample.boxes, size)[:, 1:]
    masks = None if sample.masks is None else pool_masks(sample.masks)
    kp = sample.keypoints
    if kp is not None:
        kp = torch.cat((kp[..., :2] / size, kp[..., 2:]), -1)
    return replace(sample, boxes=rows, masks=masks, keypoints=kp)


class _TrainSamples(Dataset):
    def __init__(self, cache: ImageCache, split: InstanceSplit, augment: AugmentConfig, kind: InstanceKind, *,
                 seed: int, rank: int, state: Tensor) -> None:
        self.cache, self.split, self.augment, self.kind = cache, split, augment, kind
        self.seed, self.rank, self.state = seed, rank, state

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> InstanceSample:
        epoch, mosaic = (int(v) for v in self.state.tolist())
        draw = draw_sample(self.augment, index=index, n_images=len(self), imgsz=self.cache.imgsz, seed=self.seed,
                           rank=self.rank, epoch=epoch, mosaic=bool(mosaic))
        sample = compose_sample(self.cache, self.split, draw, masks=self.kind.masks, keypoints=self.kind.keypoints,
                                flip_idx=self.kind.flip_idx)
        return _train_item(sample, self.cache.imgsz)


def collate_train(samples: Sequence[InstanceSample], sigmas: Tensor | None = None,
                  keypoints_per_object: int = 0) -> InstanceBatch:
    """Stack the images; the targets' rows gain their sample's batch index."""
    images = batch_tensor((len(samples), *samples[0].image.shape), torch.uint8)
    torch.stack([s.image for s in samples], out=images)
    return InstanceBatch(images, _stack_targets(samples, sigmas, keypoints_per_object), [s.path for s in samples],
                         [s.ori_size for s in samples])


def _stack_targets(samples: Sequence[InstanceSample], sigmas: Tensor | None,
                   keypoints_per_object: int) -> InstanceTargets:
    rows = [torch.cat((torch.full((len(s.boxes), 1), float(i)), s.boxes.float()), 1) for i, s in enumerate(samples)]
    boxes = torch.cat(rows) if rows else torch.zeros(0, 6)
    masks = keypoints = None
    if samples[0].masks is not None:
        masks = torch.cat([s.masks for s in samples if s.masks is not None])
    if samples[0].keypoints is not None:
        k = keypoints_per_object
        keypoints = torch.cat([s.keypoints.reshape(-1, k, 3) for s in samples if s.keypoints is not None])
    return InstanceTargets(boxes, masks, keypoints, sigmas)


def _sigmas(kind: InstanceKind) -> Tensor | None:
    return None if kind.sigmas is None else torch.tensor(kind.sigmas, dtype=torch.float32)


def training_targets(samples: Sequence[InstanceSample], size: int, kind: InstanceKind) -> InstanceTargets:
    """A validation batch's ground truth (``InstanceValBatch.targets``, in input pixels of side
    ``size``) as training's targets, which the family's loss reads: validation losses."""
    return _stack_targets([_train_item(s, size) for s in samples], _sigmas(kind), len(kind.flip_idx or ()))


class _Collate:
    """Picklable collate carrying the dataset's sigmas (pose) into every batch's targets."""

    def __init__(self, kind: InstanceKind) -> None:
        self.kind = kind

    def __call__(self, samples: Sequence[InstanceSample]) -> InstanceBatch:
        return collate_train(samples, _sigmas(self.kind), len(self.kind.flip_idx or ()))


class InstanceTrainPipeline:
    """Augmented batches for one rank; call :meth:`set_epoch` before each epoch.

    Args:
        split: the checked training split; imgsz: output side ``S``; batch_size: per rank.
        augment: the settings (mosaic, degrees, translate, scale, shear, hsv, fliplr);
        kind: what the targets carry; workers, seed, cache: as detection's pipeline.

    Raises:
        ConfigError: fewer images than one batch per rank, or a bad seed.
    """

    def __init__(self, split: InstanceSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 augment: AugmentConfig, kind: InstanceKind, workers: int, seed: int,
                 cache: CacheSetting = "auto") -> None:
        self.device = torch.device(device)
        self.imgsz = imgsz
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be a non-negative integer (e.g. seed=0)")
        self.cache = open_image_cache(split.images, imgsz, mode=cache)
        split, self.cache, self.skipped = usable_instances(split, self.cache)
        env = libreyolo_ddp.dist_env()
        self._seed, self._rank = seed, env.rank
        self._state = torch.tensor([0, 1], dtype=torch.int64).share_memory_()
        dataset = _TrainSamples(self.cache, split, augment, kind, seed=seed, rank=env.rank, state=self._state)
        self._shuffle = torch.Generator()
        self._shuffle.manual_seed(shuffle_seed(seed, env.rank, 0))
        distributed = libreyolo_ddp.is_dist_initialized() and env.world_size > 1
        self._loader = libreyolo_ddp.build_dataloader(
            dataset, batch_size=batch_size, shuffle=True, workers=workers, seed=seed, collate_fn=_Collate(kind),
            drop_last=True, pin_memory=self.device.type == "cuda",
            sampler=None if distributed else RandomSampler(dataset, generator=self._shuffle))
        if len(self._loader) == 0:
            raise ConfigError(
                f"the {split.name or 'training'} split has {len(split)} images, fewer than one batch of "
                f"{batch_size} on each of {env.world_size} rank(s); lower batch to at most "
                f"{max(1, len(split) // env.world_size)} or add images")
        log.info("train pipeline: %d images at %d px, batch %d, %d workers, augmentation per sample in workers",
                 len(split), imgsz, batch_size, workers)

    def set_epoch(self, epoch: int, *, mosaic: bool) -> None:
        """Start ``epoch``: reshuffle, reseed the draws, open or close mosaic."""
        if epoch < 0:
            raise ConfigError(f"epoch={epoch} must be >= 0")
        self._state.copy_(torch.tensor([epoch, int(mosaic)]))
        self._shuffle.manual_seed(shuffle_seed(self._seed, self._rank, epoch))
        libreyolo_ddp.set_loader_epoch(self._loader, epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[InstanceBatch]:
        for batch in self._loader:
            images = batch.images.to(self.device, non_blocking=True).float().div_(255)
            yield replace(batch, images=images)


class _ValSamples(Dataset):
    def __init__(self, cache: ImageCache, split: InstanceSplit, kind: InstanceKind) -> None:
        self.cache, self.split, self.kind = cache, split, kind

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> InstanceSample:
        draw = letterbox_draw(index, self.cache.imgsz)
        return compose_sample(self.cache, self.split, draw, masks=self.kind.masks, keypoints=self.kind.keypoints)


def _collate_val(samples: Sequence[InstanceSample]) -> InstanceValBatch:
    images = batch_tensor((len(samples), *samples[0].image.shape), torch.uint8)
    torch.stack([s.image for s in samples], out=images)
    return InstanceValBatch(images, list(samples))


class InstanceValPipeline:
    """Letterboxed validation batches with their ground truth in input pixels; fixed order, each
    image once over all ranks."""

    def __init__(self, split: InstanceSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 kind: InstanceKind, workers: int, cache: CacheSetting = "auto") -> None:
        self.device = torch.device(device)
        self.imgsz, self.kind = imgsz, kind
        self.cache = open_image_cache(split.images, imgsz, mode=cache)
        split, self.cache, self.skipped = usable_instances(split, self.cache)
        self._loader = libreyolo_ddp.build_dataloader(
            _ValSamples(self.cache, split, kind), batch_size=batch_size, shuffle=False, workers=workers, seed=0,
            collate_fn=_collate_val, drop_last=False, pin_memory=self.device.type == "cuda", shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[InstanceValBatch]:
        for batch in self._loader:
            yield replace(batch, images=to_network_input(batch.images.to(self.device, non_blocking=True)))
