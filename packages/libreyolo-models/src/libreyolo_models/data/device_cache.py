"""The decoded training images kept on the training device: uploaded once, gathered per batch.

Why: on the GPU path a mosaic sample needs four cached tiles (4 x S x S x 3 bytes, ~4.9 MB at
640 px). Shipping them every step from the workers through shared memory, pinning and PCIe is
what bounds graphed training on one H200 (the pipeline alone delivered ~451 img/s while the
network could take more). A split of a few thousand images is a few GiB, which a modern GPU holds
easily; uploaded once per run, the workers ship only what is per sample and small (tile indices,
draws, targets) and the main process gathers the tiles on the device (``resident[indices]``).
Rendering then runs exactly as before, on exactly the same tile pixels, so batches are
bit-identical with and without the resident copy.

When (the ``cache=`` setting, see ``cache_store``; only where batches are rendered on the device,
``gpu_augment=True``):

- ``"auto"``: on CUDA, when the images fit in :data:`DEVICE_SHARE` of the device's free memory.
- ``"gpu"``: always (on CUDA it must fit in the free memory). On the CPU it keeps the copy in this
  process's memory, which is what the CPU tests use to check the resident path.
- anything else (``"ram"``, ``"disk"``, a folder, ``"off"``): never.

Only detection training (``pipeline.TrainPipeline``) reads a resident copy; validation and the
classification and segmentation pipelines treat ``"gpu"`` as ``"auto"`` (host placement only).

Each DDP rank holds its own copy on its own device. ``train.autobatch`` asks :func:`plan_residency`
the same question before it sizes the batch, and leaves the copy's bytes out of the budget.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .cache_store import CachePlace
from .image_cache import ImageCache

__all__ = ["DEVICE_SHARE", "Residency", "may_be_resident", "plan_residency", "resident_bytes", "upload_images"]

log = logging.getLogger(__name__)

DEVICE_SHARE = 0.25
"""``cache="auto"`` keeps the images on the GPU only if they take at most this share of its free
memory: the rest stays for the training step (autobatch plans it around the copy)."""

UPLOAD_CHUNK_BYTES = 256 * 2**20
"""Slots read from the memory map and copied per step of the upload (bounds the host staging copy)."""


@dataclass(frozen=True)
class Residency:
    """Whether the training images go to the device, and why (the log line says it).

    Attributes:
        resident: upload them.
        nbytes: bytes the copy takes (or would take) on the device.
        reason: one clause for the log: the size and the rule that decided.
    """

    resident: bool
    nbytes: int
    reason: str


def resident_bytes(n_images: int, imgsz: int) -> int:
    """Device bytes of ``n_images`` cached slots of ``imgsz`` (``uint8 [N, S, S, 3]``)."""
    return n_images * imgsz * imgsz * 3


def may_be_resident(place: CachePlace, device: torch.device, *, gpu_augment: bool) -> bool:
    """Whether the setting and device could keep images on the device at all (cheap: no sizes).

    Autobatch asks this first, so it only counts the split's images when the answer may be yes.
    """
    if place.mode == "gpu":
        return True
    return place.mode == "auto" and gpu_augment and device.type == "cuda"


def plan_residency(place: CachePlace, device: torch.device, *, gpu_augment: bool, n_images: int, imgsz: int,
                   free_bytes: int | None = None) -> Residency:
    """Decide whether the training images live on ``device`` (see the module docstring for the rule).

    Args:
        place: the parsed ``cache=`` setting.
        device: the training device.
        gpu_augment: batches are rendered on ``device`` (the only path that reads a resident copy).
        n_images: images of the training split (after undecodable ones are left out).
        imgsz: slot side ``S``.
        free_bytes: free memory of a CUDA ``device``; default ``torch.cuda.mem_get_info``.

    Raises:
        ConfigError: ``cache="gpu"`` with ``gpu_augment=False``, or on a CUDA device whose free
            memory cannot hold the images.
    """
    nbytes = resident_bytes(n_images, imgsz)
    size = f"{n_images} images at {imgsz} px = {nbytes / 2**30:.2f} GiB"
    if place.mode == "gpu" and not gpu_augment:
        raise ConfigError(f"cache='gpu' keeps the training images on {device} for batches rendered there, but "
                          f"gpu_augment=False renders them in the workers; use gpu_augment=True (or 'auto' on "
                          f"CUDA), or cache='auto'")
    if not may_be_resident(place, device, gpu_augment=gpu_augment):
        why = (f"cache={str(place)!r}" if place.mode != "auto"
               else f"training on {device.type}" if device.type != "cuda" else "gpu_augment=False")
        return Residency(False, nbytes, f"{size} stay on the host ({why})")
    if device.type != "cuda":  # only "gpu" gets here: a copy in this process's memory
        return Residency(True, nbytes, f"{size} held on {device} (cache='gpu')")
    free = torch.cuda.mem_get_info(device)[0] if free_bytes is None else free_bytes
    share = nbytes / max(free, 1)
    facts = f"{size}, {100 * share:.0f}% of the {free / 2**30:.1f} GiB free on {device}"
    if place.mode == "gpu":
        if nbytes >= free:
            raise ConfigError(f"cache='gpu': {facts}, more than is free; use cache='auto' (GPU only when the "
                              f"images fit in {DEVICE_SHARE:.0%} of free memory) or cache='ram', or lower imgsz")
        return Residency(True, nbytes, f"{facts} (cache='gpu')")
    if share > DEVICE_SHARE:
        return Residency(False, nbytes, f"{facts}: over the {DEVICE_SHARE:.0%} cache='auto' allows, so they stay "
                                        f"on the host (cache='gpu' forces the upload)")
    return Residency(True, nbytes, facts)


def upload_images(cache: ImageCache, device: torch.device) -> Tensor:
    """Copy every slot of ``cache`` (in its index order) to ``device``, once.

    Whole slots are copied, so row ``i`` of the result is what ``cache.read_into(i, ...)`` gives
    inside ``hw[i]``; rendering reads nothing outside it.

    Returns:
        ``uint8 [N, S, S, 3]`` on ``device``.
    """
    size = cache.imgsz
    resident = torch.empty((len(cache), size, size, 3), dtype=torch.uint8, device=device)
    step = max(1, UPLOAD_CHUNK_BYTES // (size * size * 3))
    for start in range(0, len(cache), step):
        stop = min(start + step, len(cache))
        block = np.ascontiguousarray(cache.read_slots(start, stop))
        resident[start:stop].copy_(torch.from_numpy(block))  # from pageable memory: synchronous, safe to reuse
    return resident
