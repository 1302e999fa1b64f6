"""The one place that builds a DataLoader, for training and validation, one process or many.

Sampler choice, per-rank seeding, worker seeding, pinning and worker persistence are
decided here once, so the train loader and the validation loader cannot drift apart
and no caller re-implements the distributed sampler block.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sized
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, Subset

from libreyolo_ddp.collectives import is_dist_initialized
from libreyolo_ddp.env import dist_env
from libreyolo_ddp.parent_watch import exit_with_parent
from libreyolo_ddp.seeds import seed_dataloader_worker, seed_for_rank

log = logging.getLogger(__name__)

ShardMode = Literal["sampler", "range", "none"]


def shard_range(n: int, rank: int, world_size: int) -> range:
    """Contiguous, unpadded slice of ``range(n)`` owned by ``rank``.

    For validation: over all ranks every index appears exactly once (no padding
    duplicates that would bias a metric), and shard sizes differ by at most one.

    Args:
        n: number of items, >= 0.
        rank: 0 .. world_size - 1.
        world_size: >= 1.

    Raises:
        ValueError: an argument is out of range.
    """
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    if n < 0:
        raise ValueError(f"n={n} must be >= 0 (the number of items to shard)")
    return range(n * rank // world_size, n * (rank + 1) // world_size)


def _chained_worker_init(user_fn: Callable[[int], None] | None, worker_id: int) -> None:
    exit_with_parent()  # a worker never outlives the training process (parent_watch says why)
    seed_dataloader_worker(worker_id)
    if user_fn is not None:
        user_fn(worker_id)


def _resolve_shard(shard: ShardMode | None, sampler: Sampler | None, distributed: bool) -> ShardMode:
    if shard is None:
        return "sampler" if distributed and sampler is None else "none"
    if shard not in ("sampler", "range", "none"):
        raise ValueError(f"shard={shard!r} is not one of 'sampler', 'range', 'none' (or None for automatic)")
    if sampler is not None and shard != "none":
        raise ValueError(
            f"shard={shard!r} and an explicit sampler were both given; a custom sampler must do its own "
            f"sharding, so pass shard='none' with it, or drop the sampler"
        )
    return shard


def build_dataloader(
    dataset: Dataset,
    *,
    batch_size: int,
    shuffle: bool,
    workers: int,
    seed: int,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    drop_last: bool = True,
    pin_memory: bool | None = None,
    persistent_workers: bool | None = None,
    sampler: Sampler | None = None,
    generator: torch.Generator | None = None,
    shard: ShardMode | None = None,
    prefetch_factor: int | None = None,
    worker_init_fn: Callable[[int], None] | None = None,
) -> DataLoader:
    """Build the DataLoader for training or validation, distributed or not.

    With an initialized process group of two or more ranks, the default is a
    ``DistributedSampler`` (``shuffle`` and ``seed`` passed through, ``drop_last``
    applied to the sampler too), so every rank sees a disjoint shard and runs the same
    number of steps: a rank with one step fewer would leave the others waiting in the
    gradient all-reduce. Call :func:`set_loader_epoch` at the start of every epoch,
    or every epoch shuffles alike.

    For validation pass ``shard="range", shuffle=False, drop_last=False``: each rank
    gets the contiguous, unpadded :func:`shard_range` of the dataset, so every item is
    evaluated exactly once over the ranks.

    Args:
        dataset: a map-style dataset (``len`` and ``__getitem__``).
        batch_size: images per step on THIS rank (split the global batch first with
            :func:`~libreyolo_ddp.split_global_batch`).
        shuffle: reshuffle every epoch (training) or keep order (validation).
        workers: DataLoader worker processes; 0 loads in the main process.
        seed: the configured seed; the rank's shuffle generator and worker seeds
            derive from it (:func:`~libreyolo_ddp.seed_for_rank`).
        collate_fn: merges a list of samples into a batch.
        drop_last: drop the last incomplete batch (and the sampler's uneven tail).
            Keep True for training so ranks stay in step; False for validation.
        pin_memory: page-locked host batches for faster copies; default: CUDA is
            available.
        persistent_workers: keep workers alive across epochs; default: ``workers > 0``.
        sampler: a custom sampler; then this function does no sharding of its own
            (``shard`` must be None or "none").
        generator: RNG for shuffling and worker base seeds; default: a generator
            seeded with this rank's seed.
        shard: "sampler" (DistributedSampler), "range" (contiguous unpadded shard),
            "none" (every rank loads everything); None chooses "sampler" under a
            process group and "none" otherwise.
        prefetch_factor: batches loaded ahead per worker (only with ``workers > 0``);
            torch's default when None.
        worker_init_fn: called in each worker after this package seeds it.

    Raises:
        ValueError: a bad batch size, worker count or option combination.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(
            f"batch_size={batch_size!r} must be a positive integer (the per-rank batch; "
            f"split the global batch with split_global_batch first)"
        )
    if workers < 0:
        raise ValueError(f"workers={workers} must be >= 0 (0 loads batches in the main process)")
    if persistent_workers and workers == 0:
        raise ValueError("persistent_workers=True needs workers > 0; pass workers>=1 or drop persistent_workers")
    env = dist_env()
    distributed = is_dist_initialized() and env.world_size > 1
    mode = _resolve_shard(shard, sampler, distributed)
    if mode == "range":
        dataset = Subset(dataset, shard_range(len(dataset), env.rank, env.world_size))  # type: ignore[arg-type]
    if mode == "sampler":
        sampler = DistributedSampler(
            dataset, num_replicas=env.world_size, rank=env.rank, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
    if generator is None:
        generator = torch.Generator()
        generator.manual_seed(seed_for_rank(seed, env.rank))
    extra: dict[str, Any] = {}
    if workers > 0:
        extra["persistent_workers"] = True if persistent_workers is None else persistent_workers
        if prefetch_factor is not None:
            extra["prefetch_factor"] = prefetch_factor
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle if sampler is None else False,
        sampler=sampler,
        num_workers=workers,
        collate_fn=collate_fn,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        drop_last=drop_last,
        generator=generator,
        worker_init_fn=functools.partial(_chained_worker_init, worker_init_fn),
        **extra,
    )
    if isinstance(dataset, Sized):
        log.debug(
            "dataloader: %d items on rank %d/%d, shard=%s, batch %d, %d workers, %d steps",
            len(dataset), env.rank, env.world_size, mode, batch_size, workers, len(loader),
        )
    return loader


def set_loader_epoch(loader: DataLoader, epoch: int) -> bool:
    """Tell the loader's sampler which epoch starts, so each epoch shuffles differently.

    Call it at the start of every epoch on every rank. ``DistributedSampler`` derives
    its permutation from ``seed + epoch``; without this call every epoch repeats the
    same order.

    Returns:
        True when a sampler took the epoch, False when the loader has none that does.
    """
    for candidate in (loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
        set_epoch = getattr(candidate, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)
            return True
    return False
