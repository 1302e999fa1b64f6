"""Training and validation batches of a point split.

Training: each image is letterboxed onto the ``S x S`` canvas, then warped by one affine map
(rotation, scale, shear, translation), colour-jittered in HSV and mirrored left-right, with every
draw from the sample's own seeded generator (``data.augment_draws.draw_sample``, mosaic off) and
the pixels through the same ops detection uses (``data.augment_ops``). Points go through the same
letterbox and affine map; those that leave the canvas are dropped. Workers render the samples on
the CPU and ship ``uint8`` images.

Validation letterboxes each image as predict does and keeps its points in original-image
coordinates: metrics compare the predictions carried back to the picture, as ``Results.points``
holds them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

import libreyolo_ddp

from ...data.augment_draws import AugmentConfig, draw_sample
from ...data.augment_ops import flip_images, grid_theta, jitter_hsv, warp_canvas
from ...data.collate import batch_tensor
from ...data.image_files import read_image
from ...data.letterbox_images import LetterboxInfo, letterbox, letterbox_batch
from ...data.loading import EpochLoader
from .reader import PointSplit

log = logging.getLogger(__name__)


@dataclass
class PointBatch:
    """A training batch: ``images`` ``float32 [B, 3, S, S]`` in [0, 1] on the device; ``targets``
    ``float32 [M, 4]`` rows (image index, class, x, y), points normalised to the ``S x S`` input."""

    images: Tensor
    targets: Tensor
    paths: list[str]


@dataclass
class PointValBatch:
    """A validation batch: letterboxed ``images`` on the device; per image its points
    (``float32 [n, 3]`` class, x, y normalised to the original picture), letterbox and path."""

    images: Tensor
    targets: list[np.ndarray]
    infos: list[LetterboxInfo]
    paths: list[str]


def augment_sample(image: np.ndarray, points: np.ndarray, *, imgsz: int, matrix: np.ndarray,
                   hsv: tuple[float, float, float], flip: bool) -> tuple[Tensor, np.ndarray]:
    """One sample: RGB ``uint8 [H, W, 3]`` and its ``[n, 3]`` (class, x, y) points normalised to it
    -> ``uint8 [3, S, S]`` and the points that stay on the canvas, normalised to it.

    ``matrix`` (``float64 [2, 3]``) maps letterbox pixels to output pixels (continuous
    coordinates), as ``draw_sample`` draws it.
    """
    boxed, info = letterbox(image, imgsz)
    canvas = boxed.mul(255.0).permute(1, 2, 0)[None]  # [1, S, S, 3], 0..255
    theta = grid_theta(torch.from_numpy(matrix)[None], imgsz, imgsz)
    pixels = warp_canvas(canvas, theta, imgsz)
    pixels = jitter_hsv(pixels, torch.tensor([hsv], dtype=torch.float32))
    pixels = flip_images(pixels, torch.tensor([flip]))
    h, w = image.shape[:2]
    xy = points[:, 1:3].astype(np.float64) * np.array([w, h]) * info.ratio + np.array(info.pad)
    xy = xy @ matrix[:, :2].T + matrix[:, 2]
    if flip:
        xy[:, 0] = imgsz - xy[:, 0]
    inside = ((xy >= 0) & (xy < imgsz)).all(axis=1)
    kept = np.concatenate([points[inside, :1], xy[inside] / imgsz], axis=1).astype(np.float32)
    return pixels[0].round_().clamp_(0, 255).to(torch.uint8), kept


class _Samples(Dataset):
    """One augmented sample per index, rendered in the worker."""

    def __init__(self, split: PointSplit, imgsz: int, augment: AugmentConfig, *, seed: int, rank: int,
                 state: Tensor) -> None:
        self.paths, self.points = [str(p) for p in split.images], list(split.points)
        self.imgsz, self.augment, self.seed, self.rank, self.state = imgsz, augment, seed, rank, state

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Tensor, np.ndarray, str]:
        draws = draw_sample(self.augment, index=index, n_images=len(self.paths), imgsz=self.imgsz, seed=self.seed,
                            rank=self.rank, epoch=int(self.state[0]), mosaic=False)
        pixels, points = augment_sample(read_image(self.paths[index]), self.points[index], imgsz=self.imgsz,
                                        matrix=draws.matrix, hsv=draws.hsv, flip=draws.flip)
        return pixels, points, self.paths[index]


def _collate(samples: Sequence[tuple[Tensor, np.ndarray, str]]) -> PointBatch:
    images = batch_tensor((len(samples), *samples[0][0].shape), torch.uint8)
    torch.stack([s[0] for s in samples], out=images)
    rows = [np.concatenate([np.full((len(s[1]), 1), i, np.float32), s[1]], axis=1) for i, s in enumerate(samples)]
    targets = torch.from_numpy(np.concatenate(rows)) if rows else torch.zeros((0, 4))
    return PointBatch(images, targets, [s[2] for s in samples])


class PointTrainPipeline:
    """Augmented point batches for one rank; call :meth:`set_epoch` before each epoch.

    Raises:
        ConfigError: fewer images than one batch per rank, or a bad seed.
    """

    def __init__(self, split: PointSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 augment: AugmentConfig, workers: int, seed: int) -> None:
        self.device = torch.device(device)
        self._loader = EpochLoader(
            lambda rank, state: _Samples(split, imgsz, augment, seed=seed, rank=rank, state=state), what="images",
            batch_size=batch_size, workers=workers, seed=seed, collate_fn=_collate,
            pin_memory=self.device.type == "cuda")
        log.info("train pipeline: %d images, %d points at %d px, batch %d, %d workers", len(split), split.n_points(),
                 imgsz, batch_size, workers)

    def set_epoch(self, epoch: int, *, mosaic: bool = False) -> None:
        """Reseed the shuffle and the draws for ``epoch`` (point training never uses mosaic)."""
        self._loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[PointBatch]:
        for batch in self._loader:
            images = batch.images.to(self.device, non_blocking=True).float().div_(255.0)
            yield PointBatch(images, batch.targets, batch.paths)


class _Letterboxed(Dataset):
    """Validation: each image letterboxed as predict does, with its original-coordinate points."""

    def __init__(self, split: PointSplit, imgsz: int) -> None:
        self.paths, self.points, self.imgsz = list(split.images), list(split.points), imgsz

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[Tensor, np.ndarray, LetterboxInfo, str]:
        pixels = torch.from_numpy(np.require(read_image(self.paths[index]), requirements=("C", "W")))
        images, (info,) = letterbox_batch([pixels], self.imgsz)
        return images[0], self.points[index], info, str(self.paths[index])


def _collate_val(samples: Sequence[tuple[Tensor, np.ndarray, LetterboxInfo, str]]) -> PointValBatch:
    images = batch_tensor((len(samples), *samples[0][0].shape), torch.float32)
    torch.stack([s[0] for s in samples], out=images)
    return PointValBatch(images, [s[1] for s in samples], [s[2] for s in samples], [s[3] for s in samples])


class PointValPipeline:
    """Letterboxed validation batches, fixed order, each image once over all ranks."""

    def __init__(self, split: PointSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 workers: int) -> None:
        self.device = torch.device(device)
        self._loader = libreyolo_ddp.build_dataloader(
            _Letterboxed(split, imgsz), batch_size=batch_size, shuffle=False, workers=workers, seed=0,
            collate_fn=_collate_val, drop_last=False, pin_memory=False, shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[PointValBatch]:
        for batch in self._loader:
            batch.images = batch.images.to(self.device, non_blocking=True)
            yield batch
