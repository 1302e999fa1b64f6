"""Training and validation batches of matting data (pictures and their alpha mattes).

Every picture reaches the network as predict sends it: resized to ``imgsz x imgsz`` (bilinear,
antialiased when shrinking; the official pipeline resizes to 1024 x 1024 whatever the aspect)
on the device by :func:`to_network`. Training resizes the alpha the same way (the targets:
``float32 [B, 1, S, S]`` in [0, 1]) and mirrors both left-right with probability ``fliplr`` (each
draw from a generator seeded by (seed, rank, epoch, index)). Validation keeps each alpha at its
picture's own size (``uint8``), where the prediction is scored after being resized back.
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

from ...data.augment_draws import sample_rng
from ...data.image_files import read_image
from ...data.loading import EpochLoader
from ..restore.reader import PairSplit
from .resize import to_network

log = logging.getLogger(__name__)


def read_alpha(path: str) -> np.ndarray:
    """An alpha matte file -> ``uint8 [H, W]`` (a grey file, or the first channel of an RGB one)."""
    return np.ascontiguousarray(read_image(path)[..., 0])


@dataclass
class MatteBatch:
    """``images``: ``float32 [B, 3, S, S]`` on the device. Training: ``targets`` ``float32
    [B, 1, S, S]``; validation: ``alphas``, each ``uint8 [H, W]`` at its picture's size (CPU)."""

    images: Tensor
    targets: Tensor | None
    alphas: list[np.ndarray]
    paths: list[str]


class _Pairs(Dataset):
    """One (picture, alpha, path) per index as tensors, mirrored when a draw says so (training)."""

    def __init__(self, split: PairSplit, fliplr: float, *, seed: int, rank: int, state: Tensor | None) -> None:
        self.images, self.alphas = [str(p) for p in split.inputs], [str(p) for p in split.targets]
        self.fliplr, self.seed, self.rank, self.state = fliplr, seed, rank, state

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, str]:
        image, alpha = read_image(self.images[index]), read_alpha(self.alphas[index])
        if self.state is not None and self.fliplr > 0:
            if sample_rng(self.seed, self.rank, int(self.state[0]), index).random() < self.fliplr:
                image, alpha = image[:, ::-1], alpha[:, ::-1]
        return (torch.from_numpy(np.require(image, requirements=("C", "W"))),
                torch.from_numpy(np.require(alpha, requirements=("C", "W"))),
                self.images[index])


def _as_lists(samples: Sequence[tuple[Tensor, Tensor, str]]) -> tuple[list[Tensor], list[Tensor], list[str]]:
    return [s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples]


class MatteTrainPipeline:
    """Resized, flipped pictures and alphas for one rank; call :meth:`set_epoch` each epoch."""

    def __init__(self, split: PairSplit, *, imgsz: int, batch_size: int, device: torch.device | str, fliplr: float,
                 workers: int, seed: int) -> None:
        self.device, self.imgsz = torch.device(device), imgsz
        self._loader = EpochLoader(lambda rank, state: _Pairs(split, fliplr, seed=seed, rank=rank, state=state),
                                   what="pictures", batch_size=batch_size, workers=workers, seed=seed,
                                   collate_fn=_as_lists, pin_memory=False)
        log.info("train pipeline: %d pictures at %d px, batch %d, %d workers", len(split), imgsz, batch_size, workers)

    def set_epoch(self, epoch: int, *, mosaic: bool = False) -> None:
        """Reseed the shuffle and the flips for ``epoch`` (``mosaic`` has no meaning here)."""
        self._loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[MatteBatch]:
        for images, alphas, paths in self._loader:
            x = torch.stack([to_network(im, self.imgsz, self.device) for im in images])
            y = torch.stack([to_network(a, self.imgsz, self.device) for a in alphas])
            yield MatteBatch(x, y, [], paths)


class MatteValPipeline:
    """Every validation picture once over the ranks, resized for the network; alphas kept as they are."""

    def __init__(self, split: PairSplit, *, imgsz: int, batch_size: int, device: torch.device | str,
                 workers: int) -> None:
        self.device, self.imgsz = torch.device(device), imgsz
        self._loader = libreyolo_ddp.build_dataloader(
            _Pairs(split, 0.0, seed=0, rank=0, state=None), batch_size=batch_size, shuffle=False, workers=workers,
            seed=0, collate_fn=_as_lists, drop_last=False, pin_memory=False, shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[MatteBatch]:
        for images, alphas, paths in self._loader:
            x = torch.stack([to_network(im, self.imgsz, self.device) for im in images])
            yield MatteBatch(x, None, [a.numpy() for a in alphas], paths)
