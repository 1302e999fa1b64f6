"""What DataLoader workers hand to the training loop, and how samples become those batches.

Two shapes travel, one per training path:

- CPU path: each worker augments one :class:`Sample` (uint8 image, its targets) at a time, and
  :func:`collate_samples` merges them into an :class:`ImageBatch` whose targets are one
  ``[M, 6]`` tensor with the batch index in column 0. Validation uses the same shapes.
- GPU path: :func:`collate_tiles` builds a :class:`TileBatch` in the worker: the cached uint8 tiles
  each sample needs (main image and, for mosaic, its three partners: workers ship the partners,
  so mosaic partners come from the whole split, not from the batch), the sample's draws as small
  tensors, and the final targets. Per-sample CPU work is one memcpy per tile out of the memory map;
  the box math (float64, a few hundred rows) runs here too, so the GPU only renders pixels.
  When the training images are resident on the device (``device_cache``), the worker ships the
  tiles' cache indices instead of their pixels, and :meth:`TileBatch.gather` fetches the same
  pixels there.

The CPU path is literally ``collate_tiles`` on one sample followed by :meth:`TileBatch.render` on
the CPU, so the two paths share every op and differ only in batch size and device.

Both batch types have ``pin_memory()`` (the DataLoader's pin thread calls it) and ``to()``.
In a worker, batch tensors are allocated in shared memory up front, so handing them to the main
process costs no extra copy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import get_worker_info

from .augment_draws import SampleDraws
from .augment_ops import augment_boxes, grid_theta, mosaic_offsets, render_images
from .image_cache import ImageCache
from .letterbox import LABEL_COLUMNS, letterbox_offsets

RENDER_CHUNK = 32
"""Samples rendered at once: bounds the GPU memory of a mosaic batch (2S canvases in float32)."""


def batch_tensor(shape: Sequence[int], dtype: torch.dtype, *, shared: bool | None = None) -> Tensor:
    """An uninitialized tensor, in shared memory when made inside a DataLoader worker.

    A worker's batch crosses to the main process through shared memory; torch would otherwise
    copy an ordinary tensor there on the way out, once more per batch.

    Args:
        shape: tensor shape.
        dtype: element type.
        shared: force shared memory on or off; None: on inside a DataLoader worker.
    """
    if not (get_worker_info() is not None if shared is None else shared):
        return torch.empty(tuple(shape), dtype=dtype)
    # torch.UntypedStorage._new_shared is private (the default collate uses it); without it, or if
    # set_ rejects an untyped storage, fall back to share_memory_(), which pays one extra copy.
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is not None:
        try:
            storage = new_shared(max(1, math.prod(shape)) * dtype.itemsize)
            return torch.empty(0, dtype=dtype).set_(storage, 0, tuple(shape))  # type: ignore[call-overload]  # stubs lack it
        except (TypeError, RuntimeError):
            pass
    return torch.empty(tuple(shape), dtype=dtype).share_memory_()


def pass_through(batch: object) -> object:
    """Collate for datasets whose ``__getitems__`` already returns a whole batch."""
    return batch


@dataclass
class Sample:
    """One augmented (or letterboxed) sample, as a CPU-path worker returns it.

    Attributes:
        image: ``uint8 [3, S, S]`` RGB.
        targets: ``float32 [n, 5]`` (class, cx, cy, w, h), box normalized to ``S``.
        path: the image file.
        ori_size: original ``(h, w)``.
        ratio_pad: validation only: ``(ratio, (pad_x, pad_y))`` back to the original pixels.
    """

    image: Tensor
    targets: Tensor
    path: str
    ori_size: tuple[int, int]
    ratio_pad: tuple[float, tuple[int, int]] | None = None


@dataclass
class ImageBatch:
    """Collated samples, still uint8 and on the CPU (pinned when bound for a GPU).

    Attributes:
        images: ``uint8 [B, 3, S, S]`` RGB.
        targets: ``float32 [M, 6]`` (batch index, class, cx, cy, w, h), normalized to ``S``.
        paths: image files.
        ori_sizes: original ``(h, w)`` per image.
        ratio_pad: validation only, per image.
    """

    images: Tensor
    targets: Tensor
    paths: list[str]
    ori_sizes: list[tuple[int, int]]
    ratio_pad: list[tuple[float, tuple[int, int]]] | None = None

    def pin_memory(self) -> ImageBatch:
        return replace(self, images=self.images.pin_memory(), targets=self.targets.pin_memory())


def collate_samples(samples: Sequence[Sample]) -> ImageBatch:
    """Stack samples; targets gain their sample's batch index as column 0."""
    first = samples[0].image
    images = batch_tensor((len(samples), *first.shape), first.dtype)
    torch.stack([s.image for s in samples], out=images)
    rows = [torch.cat((torch.full((len(s.targets), 1), float(i)), s.targets), dim=1)
            for i, s in enumerate(samples)]
    ratio_pad = [s.ratio_pad for s in samples]
    return ImageBatch(
        images=images, targets=torch.cat(rows) if rows else torch.zeros(0, 6),
        paths=[s.path for s in samples], ori_sizes=[s.ori_size for s in samples],
        ratio_pad=None if any(rp is None for rp in ratio_pad) else ratio_pad)  # type: ignore[arg-type]


@dataclass
class TileGroup:
    """Samples of one batch that share a canvas: all mosaic (``K = 4``, ``2S``) or all not (``K = 1``, ``S``).

    Attributes:
        positions: ``int64 [G]`` rows of the batch these samples fill.
        cache_rows: ``int64 [G, K]`` each tile's index in the image cache (and in a resident copy),
            main image first.
        tiles: ``uint8 [G, K, S, S, 3]`` those cached slots; None until :meth:`TileBatch.gather`
            when the worker shipped indices only (images resident on the device).
        offsets: ``int64 [G, K, 2]`` canvas ``(x, y)`` per tile.
        hw: ``int64 [G, K, 2]`` used ``(h, w)`` per tile.
        canvas: side of the canvas.
        theta: ``float32 [G, 2, 3]`` warp parameters (see ``augment_ops.grid_theta``).
        hsv: ``float32 [G, 3]`` HSV gains.
        flip: ``bool [G]``.
        has_hsv: some gain is not the identity (else the colour step is skipped).
        has_flip: some sample flips.
    """

    positions: Tensor
    cache_rows: Tensor
    tiles: Tensor | None
    offsets: Tensor
    hw: Tensor
    canvas: int
    theta: Tensor
    hsv: Tensor
    flip: Tensor
    has_hsv: bool
    has_flip: bool

    def render(self, imgsz: int, chunk: int = RENDER_CHUNK) -> Tensor:
        """The group's augmented pixels, ``float32 [G, 3, S, S]`` in [0, 255], on the tiles' device."""
        if self.tiles is None:
            raise ValueError("this batch carries tile indices only; gather its tiles from the resident "
                             "images first (TileBatch.gather)")
        parts = []
        for lo in range(0, len(self.tiles), chunk):
            hi = lo + chunk
            parts.append(render_images(
                self.tiles[lo:hi], self.offsets[lo:hi], self.hw[lo:hi], self.canvas, self.theta[lo:hi],
                self.hsv[lo:hi], self.flip[lo:hi], imgsz=imgsz, has_hsv=self.has_hsv, has_flip=self.has_flip))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def pin_memory(self) -> TileGroup:
        return replace(self, positions=self.positions.pin_memory(), cache_rows=self.cache_rows.pin_memory(),
                       tiles=None if self.tiles is None else self.tiles.pin_memory(), offsets=self.offsets.pin_memory(),
                       hw=self.hw.pin_memory(), theta=self.theta.pin_memory(), hsv=self.hsv.pin_memory(),
                       flip=self.flip.pin_memory())

    def to(self, device: torch.device, non_blocking: bool = False) -> TileGroup:
        """Move every tensor to ``device`` (a copy from pinned memory does not wait when ``non_blocking``)."""
        def move(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)
        return replace(self, positions=move(self.positions), cache_rows=move(self.cache_rows),
                       tiles=None if self.tiles is None else move(self.tiles), offsets=move(self.offsets),
                       hw=move(self.hw), theta=move(self.theta), hsv=move(self.hsv), flip=move(self.flip))


@dataclass
class TileBatch:
    """One GPU-path batch as a worker ships it: raw tiles, draws, and final targets.

    Attributes:
        groups: one :class:`TileGroup` per canvas kind present (mosaic first).
        targets: ``float32 [M, 6]`` (batch index, class, cx, cy, w, h), normalized to ``S``.
        paths: image file of each sample's main image.
        ori_sizes: original ``(h, w)`` of each main image.
    """

    groups: list[TileGroup]
    targets: Tensor
    paths: list[str]
    ori_sizes: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.paths)

    def render(self, imgsz: int) -> Tensor:
        """Every sample's augmented pixels in batch order: ``float32 [B, 3, S, S]`` in [0, 255]."""
        return render_groups(self.groups, len(self), imgsz)

    def pin_memory(self) -> TileBatch:
        return replace(self, groups=[g.pin_memory() for g in self.groups], targets=self.targets.pin_memory())

    def to(self, device: torch.device, non_blocking: bool = False) -> TileBatch:
        """Move what rendering reads; the targets stay on the host (the loss pads them there)."""
        return replace(self, groups=[g.to(device, non_blocking) for g in self.groups])

    def gather(self, resident: Tensor) -> TileBatch:
        """Fill each group's tiles from ``resident`` (``uint8 [N, S, S, 3]``, row ``i`` = cache index
        ``i``) on its device: one indexing kernel per group instead of shipping the pixels."""
        return replace(self, groups=[replace(g, tiles=resident[g.cache_rows.to(resident.device)]) for g in self.groups])


def render_groups(groups: Sequence[TileGroup], batch_size: int, imgsz: int) -> Tensor:
    """The groups' augmented pixels in batch order: ``float32 [batch_size, 3, S, S]`` in [0, 255].

    Groups partition the batch's rows (``positions``); one group alone is rows ``0 .. B-1`` in order.
    """
    if len(groups) == 1:
        return groups[0].render(imgsz)
    out = torch.empty((batch_size, 3, imgsz, imgsz), device=groups[0].theta.device)
    for group in groups:
        out[group.positions] = group.render(imgsz)
    return out


def collate_tiles(cache: ImageCache, labels: Sequence[np.ndarray], draws: Sequence[SampleDraws],
                  paths: Sequence[Path | str], *, shared: bool | None = None, pixels: bool = True) -> TileBatch:
    """Gather the tiles and compute the targets of a batch of drawn samples.

    Args:
        cache: the split's image cache.
        labels: per image of the split, ``float32 [n, 5]`` (class, cx, cy, w, h) normalized.
        draws: one per sample of the batch, in batch order.
        paths: per image of the split, its file.
        shared: tile memory in shared memory (default: inside a DataLoader worker).
        pixels: copy the tiles' pixels; False ships their cache indices only (the images are
            resident on the device, see :meth:`TileBatch.gather`).
    """
    imgsz = cache.imgsz
    groups, target_parts = [], []
    for is_mosaic in (True, False):
        members = [p for p, d in enumerate(draws) if d.is_mosaic == is_mosaic]
        if members:
            group, targets = _collate_group(cache, labels, [draws[p] for p in members], members,
                                            imgsz, is_mosaic, shared, pixels)
            groups.append(group)
            target_parts.append(targets)
    targets = torch.cat(target_parts)
    targets = targets[torch.argsort(targets[:, 0], stable=True)]
    return TileBatch(groups=groups, targets=targets, paths=[str(paths[d.index]) for d in draws],
                     ori_sizes=[tuple(int(v) for v in cache.ori_hw[d.index]) for d in draws])  # type: ignore[misc]


def _collate_group(cache: ImageCache, labels: Sequence[np.ndarray], draws: Sequence[SampleDraws],
                   positions: list[int], imgsz: int, is_mosaic: bool, shared: bool | None, pixels: bool
                   ) -> tuple[TileGroup, Tensor]:
    k = 4 if is_mosaic else 1
    tiles = batch_tensor((len(draws), k, imgsz, imgsz, 3), torch.uint8, shared=shared) if pixels else None
    tile_images = np.array([d.tile_indices for d in draws], dtype=np.int64).reshape(len(draws), k)
    label_rows = []
    for g, row in enumerate(tile_images):
        for t, image in enumerate(row):
            if tiles is not None:
                cache.read_into(int(image), tiles[g, t].numpy())
            if len(labels[image]):
                rows = np.asarray(labels[image], dtype=np.float64)
                label_rows.append(np.column_stack((np.full((len(rows), 2), (g, t), np.float64), rows)))
    hw = torch.from_numpy(cache.hw[tile_images].astype(np.int64))  # [G, K, 2]
    if is_mosaic:
        offsets = mosaic_offsets(torch.tensor([d.centre for d in draws], dtype=torch.int64), hw)
    else:
        offsets = letterbox_offsets(hw, imgsz)
    canvas = 2 * imgsz if is_mosaic else imgsz
    matrix = torch.from_numpy(np.stack([d.matrix for d in draws]))
    flip = torch.tensor([d.flip for d in draws], dtype=torch.bool)
    label_table = (torch.from_numpy(np.concatenate(label_rows)) if label_rows
                   else torch.zeros(0, LABEL_COLUMNS, dtype=torch.float64))
    targets = augment_boxes(label_table, offsets, hw, canvas, matrix,
                            torch.tensor([d.scale for d in draws], dtype=torch.float64), flip, imgsz)
    where = torch.tensor(positions, dtype=torch.int64)
    targets[:, 0] = where[targets[:, 0].long()].float()
    hsv = torch.tensor([d.hsv for d in draws], dtype=torch.float32)
    group = TileGroup(
        positions=where, cache_rows=torch.from_numpy(tile_images), tiles=tiles, offsets=offsets, hw=hw, canvas=canvas,
        theta=grid_theta(matrix, canvas, imgsz), hsv=hsv, flip=flip,
        has_hsv=any(d.hsv != (0.0, 1.0, 1.0) for d in draws), has_flip=bool(flip.any()))
    return group, targets
