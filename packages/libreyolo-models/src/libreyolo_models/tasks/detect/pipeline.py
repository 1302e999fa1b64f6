"""Training and validation batches for one split: cache, augmentation, DataLoader, device.

``TrainPipeline`` has two paths with one set of ops (``augment_ops``) and one set of draws
(``augment_draws``):

- CPU path (``gpu_augment=False``; the default off CUDA): DataLoader workers augment one sample at
  a time and ship uint8 images; the main process moves them to the device and divides by 255.
- GPU path (``gpu_augment=True``; the default on CUDA): workers ship cached uint8 tiles, draws and
  finished targets (a memcpy and a little box math per sample); the main process copies the
  pinned batch to the device without blocking and renders the whole batch there. On CUDA this runs
  one batch ahead on a side stream, so rendering batch ``k + 1`` overlaps the training step of
  batch ``k``. When the split's images are resident on the device (``device_cache``: ``cache="auto"``
  when they fit, or ``"gpu"``), workers ship tile indices instead of tiles and the main process
  gathers the same pixels there; the batches are bit-identical either way. On CUDA the rendering
  replays from CUDA graphs (``render_graph``), one per batch structure: the same kernels, one replay
  and a few input copies instead of about a hundred launches from the training loop's thread.

Mosaic partners are shipped by the workers (drawn from the whole split), in both paths.
``ValPipeline`` only letterboxes, deterministically, sharded over ranks when distributed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, RandomSampler

import libreyolo_ddp

from ...data.augment_draws import AugmentConfig, SampleDraws, draw_sample
from ...data.cache_store import CachePlace, parse_cache_setting
from ...data.collate import ImageBatch, Sample, TileBatch, collate_samples, collate_tiles, pass_through
from ...data.device_cache import plan_residency, upload_images
from ...data.image_cache import CacheSetting, ImageCache, open_image_cache, usable_part
from ...data.letterbox import (
    letterbox_map,
    letterbox_offsets,
    place_boxes,
    place_tiles,
    to_network_input,
    to_targets,
)
from ...data.loading import one_ahead_on_side_stream, resolve_gpu_augment, shuffle_seed, smaller_than_a_batch
from ...data.split_index import SplitIndex
from ...errors import ConfigError
from .render_graph import RenderGraphs, render_eagerly, wants_render_graphs

__all__ = ["AugmentConfig", "Batch", "TrainPipeline", "ValPipeline"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class Batch:
    """One batch on the target device, ready for the network.

    Attributes:
        images: ``float32 [B, 3, S, S]`` RGB in [0, 1] on the device.
        targets: ``float32 [M, 6]`` on the CPU (pinned when training on CUDA): (batch index,
            class, cx, cy, w, h), box normalized to the ``S x S`` input. They stay on the host
            because the loss pads them per image there (the per-image counts are free to read
            on the host, and a device read would stall the GPU), then copies once.
        paths: image file per sample (for mosaic, the main image).
        ori_sizes: original ``(h, w)`` per sample.
        ratio_pad: validation only: per image ``(ratio, (pad_x, pad_y))``, so that
            ``x_original = (x_input - pad_x) / ratio``; None for training batches.
    """

    images: Tensor
    targets: Tensor
    paths: list[str]
    ori_sizes: list[tuple[int, int]]
    ratio_pad: list[tuple[float, tuple[int, int]]] | None = None


class _TrainSplit(Dataset):
    """A split plus everything a worker needs to draw and augment any sample of any epoch."""

    def __init__(self, cache: ImageCache, index: SplitIndex, augment: AugmentConfig, *, seed: int,
                 rank: int, state: Tensor) -> None:
        self.cache, self.augment, self.seed, self.rank = cache, augment, seed, rank
        self.labels = index.labels
        self.paths = [str(p) for p in index.images]
        self.state = state  # shared memory: [epoch, mosaic open]; written by set_epoch, read here

    def __len__(self) -> int:
        return len(self.paths)

    def draw(self, index: int) -> SampleDraws:
        epoch, mosaic = (int(v) for v in self.state.tolist())
        return draw_sample(self.augment, index=index, n_images=len(self), imgsz=self.cache.imgsz,
                           seed=self.seed, rank=self.rank, epoch=epoch, mosaic=bool(mosaic))


class _AugmentedSamples(_TrainSplit):
    """CPU path: one augmented uint8 sample per index, made in a worker."""

    def __getitem__(self, index: int) -> Sample:
        one = collate_tiles(self.cache, self.labels, [self.draw(index)], self.paths, shared=False)
        image = one.render(self.cache.imgsz)[0].round_().clamp_(0, 255).to(torch.uint8)
        return Sample(image=image, targets=one.targets[:, 1:].contiguous(), path=one.paths[0],
                      ori_size=one.ori_sizes[0])


class _RawTiles(_TrainSplit):
    """GPU path: a whole batch of cached tiles (or only their indices, when the images are resident
    on the device), draws and targets per ``__getitems__`` call."""

    ship_pixels = True

    def __getitems__(self, indices: Sequence[int]) -> TileBatch:
        return collate_tiles(self.cache, self.labels, [self.draw(int(i)) for i in indices], self.paths,
                             pixels=self.ship_pixels)

    def __getitem__(self, index: int) -> TileBatch:
        return self.__getitems__([index])


class _LetterboxedSamples(Dataset):
    """Validation: each cached image letterboxed onto ``S x S``, with its targets and map back."""

    def __init__(self, cache: ImageCache, index: SplitIndex) -> None:
        self.cache, self.labels = cache, index.labels
        self.paths = [str(p) for p in index.images]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Sample:
        size = self.cache.imgsz
        tile = torch.empty((1, 1, size, size, 3), dtype=torch.uint8)
        self.cache.read_into(index, tile[0, 0].numpy())
        hw = torch.from_numpy(self.cache.hw[index].astype(np.int64)).view(1, 1, 2)
        offsets = letterbox_offsets(hw, size)
        image = place_tiles(tile, offsets, hw, size)[0].permute(2, 0, 1).contiguous()
        rows = torch.from_numpy(np.asarray(self.labels[index], dtype=np.float64)).view(-1, 5)
        rows = torch.cat((torch.zeros(len(rows), 2, dtype=torch.float64), rows), dim=1)
        targets = to_targets(rows[:, 0], rows[:, 2], place_boxes(rows, offsets, hw, size), size)
        ori = tuple(int(v) for v in self.cache.ori_hw[index])
        return Sample(image=image, targets=targets[:, 1:].contiguous(), path=self.paths[index],
                      ori_size=ori, ratio_pad=letterbox_map(ori, tuple(hw[0, 0].tolist()), size))  # type: ignore[arg-type]


class TrainPipeline:
    """Augmented training batches for one rank, on ``device``, epoch after epoch.

    Call :meth:`set_epoch` before iterating each epoch (it reseeds the shuffle and the draws and
    opens or closes mosaic); every batch has ``batch_size`` images (the last partial one is
    dropped, so every rank steps alike).

    Args:
        index: the checked training split.
        imgsz: network input side ``S`` in pixels.
        batch_size: images per batch on this rank.
        device: where batches go.
        augment: augmentation settings.
        workers: DataLoader worker processes (0: load in this process).
        seed: the run's seed; draws are seeded by (seed, rank, epoch, sample index).
        gpu_augment: augment whole batches on ``device`` (True), per sample in workers (False), or
            ``"auto"``: True on CUDA devices.
        cache: where the decoded images live (``"auto"``, ``"ram"``, ``"disk"``, ``"gpu"``, ``"off"``
            or a folder; see ``cache_store``; ``"auto"`` and ``"gpu"`` may also keep a copy on
            ``device``, see ``device_cache``).
        cache_dir: folder for a disk cache.

    Attributes:
        skipped: images of ``index`` that could not be decoded for the cache and are left out
            (each was logged once); the trainer counts them in its epoch summary.
        resident: ``uint8 [N, S, S, 3]`` the split's images on ``device``, or None (see
            ``device_cache``); its bytes are part of this run's device memory.
        render_graphs: the CUDA graphs the GPU path renders batches with, or None (eager).

    Raises:
        ConfigError: a bad argument, fewer images than one batch per rank, or ``cache="gpu"``
            where the images cannot go to the device.
        EmptySplitError: no image of the split can be decoded.
        ImageCacheError: there is no room for the cache.
    """

    def __init__(self, index: SplitIndex, *, imgsz: int, batch_size: int, device: torch.device | str,
                 augment: AugmentConfig, workers: int, seed: int,
                 gpu_augment: bool | Literal["auto"] = "auto", cache: CacheSetting = "auto",
                 cache_dir: Path | None = None) -> None:
        self.device = torch.device(device)
        self.gpu_augment: bool = resolve_gpu_augment(gpu_augment, self.device)
        self.imgsz = imgsz
        if not isinstance(augment, AugmentConfig):
            raise ConfigError(f"augment={augment!r} must be an AugmentConfig (e.g. AugmentConfig(mosaic=0.5))")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be a non-negative integer (e.g. seed=0)")
        place = parse_cache_setting(cache, cache_dir)
        self.cache = open_image_cache(index.images, imgsz, mode=place, cache_dir=cache_dir)
        index, self.cache, self.skipped = usable_part(index, self.cache)
        _warn_size_mismatch(index, self.cache)
        self.resident = self._keep_on_device(place)
        # On CUDA the batch rendering replays from graphs (render_graph): same bytes, one replay.
        self.render_graphs = (RenderGraphs(imgsz, self.resident)
                              if self.gpu_augment and wants_render_graphs(self.device) else None)
        env = libreyolo_ddp.dist_env()
        self._seed, self._rank = seed, env.rank
        self._state = torch.tensor([0, 1], dtype=torch.int64).share_memory_()
        # One side stream for the run: the rendering graphs' static buffers are reused batch after
        # batch, and a stream per epoch would leave two epochs' replays unordered against each other.
        self._side_stream = (torch.cuda.Stream(device=self.device)
                             if self.gpu_augment and self.device.type == "cuda" else None)
        kind = _RawTiles if self.gpu_augment else _AugmentedSamples
        dataset = kind(self.cache, index, augment, seed=seed, rank=env.rank, state=self._state)
        if isinstance(dataset, _RawTiles):  # the only path that can read a resident copy
            dataset.ship_pixels = self.resident is None
        # A DistributedSampler shuffles by (seed, epoch). Without one, the shuffle gets its own
        # generator, reseeded per epoch: each epoch's order is then a function of (seed, rank, epoch)
        # (a resumed run repeats it) and does not depend on whether workers persist, which changes
        # how the DataLoader consumes its own generator.
        self._shuffle = torch.Generator()
        self._shuffle.manual_seed(shuffle_seed(seed, env.rank, 0))
        distributed = libreyolo_ddp.is_dist_initialized() and env.world_size > 1
        self._loader = libreyolo_ddp.build_dataloader(
            dataset, batch_size=batch_size, shuffle=True, workers=workers, seed=seed,
            collate_fn=pass_through if self.gpu_augment else collate_samples, drop_last=True,
            pin_memory=self.device.type == "cuda",
            sampler=None if distributed else RandomSampler(dataset, generator=self._shuffle))
        if len(self._loader) == 0:
            raise smaller_than_a_batch(index.name or "training", len(index), batch_size, env.world_size,
                                       index.problems)
        log.info("train pipeline: %d images at %d px, batch %d, %d workers, augmentation %s",
                 len(index), imgsz, batch_size, workers,
                 f"batched on {self.device}" if self.gpu_augment else "per sample in workers")

    def _keep_on_device(self, place: CachePlace) -> Tensor | None:
        """Upload the split's images to the device when ``device_cache`` says so; log the decision."""
        residency = plan_residency(place, self.device, gpu_augment=self.gpu_augment, n_images=len(self.cache),
                                   imgsz=self.cache.imgsz)
        if not residency.resident:
            # Off CUDA, or on the CPU path, there is no choice to report; on the GPU path say why not.
            level = logging.INFO if self.device.type == "cuda" and self.gpu_augment else logging.DEBUG
            log.log(level, "image cache not on the device: %s", residency.reason)
            return None
        start = time.perf_counter()
        resident = upload_images(self.cache, self.device)
        log.info("image cache on the device: %s, uploaded in %.1f s; workers ship tile indices only",
                 residency.reason, time.perf_counter() - start)
        return resident

    def set_epoch(self, epoch: int, *, mosaic: bool) -> None:
        """Start ``epoch``: reshuffle, reseed the draws, and open or close mosaic."""
        if epoch < 0:
            raise ConfigError(f"epoch={epoch} must be >= 0")
        if self.render_graphs is not None and bool(self._state[1]) != mosaic:
            self.render_graphs.reset(f"mosaic {'opens' if mosaic else 'closes'} at epoch {epoch}: new batch structures")
        self._state.copy_(torch.tensor([epoch, int(mosaic)]))
        self._shuffle.manual_seed(shuffle_seed(self._seed, self._rank, epoch))
        libreyolo_ddp.set_loader_epoch(self._loader, epoch)

    def __len__(self) -> int:
        """Batches (optimizer steps) per epoch on this rank."""
        return len(self._loader)

    def __iter__(self) -> Iterator[Batch]:
        if not self.gpu_augment:
            return map(self._upload, self._loader)
        if self._side_stream is not None:
            return one_ahead_on_side_stream(self._loader, self._render, self.device, self._side_stream)
        return map(self._render, self._loader)

    def close(self) -> None:
        """Free the rendering graphs' memory and the resident images now, not when collected.

        The pipeline is unusable afterwards. The trainer calls it when a run ends, so a second run
        in the same process finds the device memory free.
        """
        if self.render_graphs is not None:
            self.render_graphs.release()
            totals = self.render_graphs.totals()
            log.info("batch rendering: %d CUDA graph(s), %d batches replayed, %d rendered eagerly, pool %.2f GiB",
                     totals.graphs, totals.replays, totals.eager_calls, totals.pool_bytes / 2**30)
            self.render_graphs = None
        self.resident = None

    def _upload(self, batch: ImageBatch) -> Batch:
        images = batch.images.to(self.device, non_blocking=True).float().div_(255)
        return Batch(images, batch.targets, batch.paths, batch.ori_sizes)

    def _render(self, batch: TileBatch) -> Batch:
        with torch.no_grad():
            moved = batch.to(self.device, non_blocking=True)
            if self.render_graphs is not None:  # the graph's output buffer: divided into a tensor of its own
                images = self.render_graphs(moved).div(255)
            else:
                images = render_eagerly(moved, self.imgsz, self.resident).div_(255)
        return Batch(images, batch.targets, batch.paths, batch.ori_sizes)


class ValPipeline:
    """Letterboxed validation batches: no augmentation, fixed order, each image once over all ranks.

    Args:
        index: the checked validation split.
        imgsz: network input side ``S``.
        batch_size: images per batch on this rank.
        device: where batches go.
        workers: DataLoader worker processes.
        cache: where the decoded images live.
        cache_dir: folder for a disk cache.

    Attributes:
        skipped: images that could not be decoded for the cache and are left out.
    """

    def __init__(self, index: SplitIndex, *, imgsz: int, batch_size: int, device: torch.device | str,
                 workers: int, cache: CacheSetting = "auto", cache_dir: Path | None = None) -> None:
        self.device = torch.device(device)
        self.imgsz = imgsz
        self.cache = open_image_cache(index.images, imgsz, mode=cache, cache_dir=cache_dir)
        index, self.cache, self.skipped = usable_part(index, self.cache)
        _warn_size_mismatch(index, self.cache)
        self._loader = libreyolo_ddp.build_dataloader(
            _LetterboxedSamples(self.cache, index), batch_size=batch_size, shuffle=False, workers=workers,
            seed=0, collate_fn=collate_samples, drop_last=False, pin_memory=self.device.type == "cuda",
            shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Batch]:
        for batch in self._loader:
            images = to_network_input(batch.images.to(self.device, non_blocking=True))
            yield Batch(images, batch.targets, batch.paths,
                        batch.ori_sizes, batch.ratio_pad)


def _warn_size_mismatch(index: SplitIndex, cache: ImageCache) -> None:
    if len(index.sizes) != len(cache):
        return
    scanned = np.asarray(index.sizes, dtype=np.int64).reshape(-1, 2)
    differ = np.flatnonzero((scanned != cache.ori_hw).any(axis=1))
    if len(differ):
        i = int(differ[0])
        log.warning("%d image(s) decode to another size than the dataset scan recorded (first: %s, scan "
                    "%s, decoded %s); labels are normalized, so they still fit, but re-scan the split "
                    "if files changed", len(differ), index.images[i], tuple(scanned[i]), tuple(cache.ori_hw[i]))
