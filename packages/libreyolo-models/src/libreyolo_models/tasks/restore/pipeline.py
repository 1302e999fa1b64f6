"""Training and validation batches of paired restoration data (degraded input, clean target).

Training cuts one random ``S x S`` crop per pair, the same window from both images (the official
NAFNet recipe's ``gt_size``), and mirrors both left-right with probability ``fliplr``; a picture
smaller than the crop is first padded by reflection on its right and bottom. Every draw comes
from a generator seeded by (seed, rank, epoch, index), so a sample does not depend on the worker
or batch it lands in. Workers decode the files and ship ``uint8`` crops.

Validation runs whole pictures, as predict does (the family tiles those larger than its
training crop): pictures of one size are batched together, so no picture is padded by another's
size, and each is seen exactly once over the ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

import libreyolo_ddp

from ...data.augment_draws import sample_rng
from ...data.collate import batch_tensor
from ...data.image_files import read_image
from ...data.loading import EpochLoader
from .reader import PairSplit

log = logging.getLogger(__name__)


@dataclass
class RestoreBatch:
    """A batch on its device: ``images`` (degraded) and ``targets`` (clean), ``float32 [B, 3, S, S]``
    in [0, 1]. Validation batches hold whole pictures of one size instead of crops."""

    images: Tensor
    targets: Tensor
    paths: list[str]


def _chw(image: np.ndarray) -> Tensor:
    return torch.from_numpy(np.require(image, requirements=("C", "W"))).permute(2, 0, 1)  # PIL arrays are read-only


class _Crops(Dataset):
    """One aligned random crop (and flip) of a pair per index, as ``uint8 [3, S, S]`` tensors."""

    def __init__(self, split: PairSplit, imgsz: int, fliplr: float, *, seed: int, rank: int, state: Tensor) -> None:
        self.inputs, self.targets = [str(p) for p in split.inputs], [str(p) for p in split.targets]
        self.imgsz, self.fliplr, self.seed, self.rank, self.state = imgsz, fliplr, seed, rank, state

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, str]:
        given, clean = _chw(read_image(self.inputs[index])), _chw(read_image(self.targets[index]))
        rng = sample_rng(self.seed, self.rank, int(self.state[0]), index)
        u = rng.random(3)  # fixed order: y, x, flip
        return (*crop_pair(given, clean, self.imgsz, float(u[0]), float(u[1]), bool(u[2] < self.fliplr)),
                self.inputs[index])


def crop_pair(given: Tensor, clean: Tensor, size: int, uy: float, ux: float, flip: bool) -> tuple[Tensor, Tensor]:
    """The same ``size x size`` window of two ``[C, H, W]`` images (reflect-padded first when a side
    is shorter), its corner at fractions ``uy``, ``ux`` of the free range, mirrored when ``flip``."""
    h, w = given.shape[-2:]
    pad_h, pad_w = max(0, size - h), max(0, size - w)
    if pad_h or pad_w:
        mode = "reflect" if pad_h < h and pad_w < w else "replicate"  # reflect needs the pad shorter than the side
        given = F.pad(given[None].float(), (0, pad_w, 0, pad_h), mode=mode)[0].to(given.dtype)
        clean = F.pad(clean[None].float(), (0, pad_w, 0, pad_h), mode=mode)[0].to(clean.dtype)
        h, w = h + pad_h, w + pad_w
    y, x = int(uy * (h - size + 1)), int(ux * (w - size + 1))
    given, clean = given[:, y:y + size, x:x + size], clean[:, y:y + size, x:x + size]
    if flip:
        given, clean = given.flip(-1), clean.flip(-1)
    return given.contiguous(), clean.contiguous()


def _collate_crops(samples: Sequence[tuple[Tensor, Tensor, str]]) -> tuple[Tensor, Tensor, list[str]]:
    given = batch_tensor((len(samples), *samples[0][0].shape), torch.uint8)
    clean = batch_tensor((len(samples), *samples[0][1].shape), torch.uint8)
    torch.stack([s[0] for s in samples], out=given)
    torch.stack([s[1] for s in samples], out=clean)
    return given, clean, [s[2] for s in samples]


class PairTrainPipeline:
    """Random aligned crops of the training pairs for one rank; call :meth:`set_epoch` each epoch.

    Raises:
        ConfigError: fewer pairs than one batch per rank, or a bad seed.
    """

    def __init__(self, split: PairSplit, *, imgsz: int, batch_size: int, device: torch.device | str, fliplr: float,
                 workers: int, seed: int) -> None:
        self.device = torch.device(device)
        self._loader = EpochLoader(
            lambda rank, state: _Crops(split, imgsz, fliplr, seed=seed, rank=rank, state=state), what="pairs",
            batch_size=batch_size, workers=workers, seed=seed, collate_fn=_collate_crops,
            pin_memory=self.device.type == "cuda")
        log.info("train pipeline: %d pairs, %d px crops, batch %d, %d workers", len(split), imgsz, batch_size, workers)

    def set_epoch(self, epoch: int, *, mosaic: bool = False) -> None:
        """Reseed the shuffle and the crops for ``epoch`` (``mosaic`` has no meaning here)."""
        self._loader.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[RestoreBatch]:
        for given, clean, paths in self._loader:
            yield RestoreBatch(upload(given, self.device), upload(clean, self.device), paths)


def upload(pixels: Tensor, device: torch.device) -> Tensor:
    """``uint8 [B, 3, H, W]`` -> ``float32`` in [0, 1] on ``device``."""
    return pixels.to(device, non_blocking=True).float().div_(255.0)


class _SameSizeGroups(Dataset):
    """Validation: each item is up to ``batch_size`` whole pairs of one size, in a fixed order."""

    def __init__(self, split: PairSplit, batch_size: int) -> None:
        self.split = split
        by_size: dict[tuple[int, int], list[int]] = {}
        for i, size in enumerate(split.sizes):
            by_size.setdefault(size, []).append(i)
        self.groups = [members[k:k + batch_size] for _, members in sorted(by_size.items())
                       for k in range(0, len(members), batch_size)]

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, list[str]]:
        members = self.groups[index]
        given = torch.stack([_chw(read_image(self.split.inputs[i])) for i in members])
        clean = torch.stack([_chw(read_image(self.split.targets[i])) for i in members])
        return given, clean, [str(self.split.inputs[i]) for i in members]


def _first(items: Sequence[tuple[Tensor, Tensor, list[str]]]) -> tuple[Tensor, Tensor, list[str]]:
    """Validation items are whole groups already (batch_size=1 in the loader)."""
    return items[0]


class PairValPipeline:
    """Whole validation pictures, same-size ones batched together, each once over all ranks."""

    def __init__(self, split: PairSplit, *, batch_size: int, device: torch.device | str, workers: int) -> None:
        self.device = torch.device(device)
        self._loader = libreyolo_ddp.build_dataloader(
            _SameSizeGroups(split, batch_size), batch_size=1, shuffle=False, workers=workers, seed=0,
            collate_fn=_first, drop_last=False, pin_memory=False, shard="range")

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[RestoreBatch]:
        for given, clean, paths in self._loader:
            yield RestoreBatch(upload(given, self.device), upload(clean, self.device), paths)
