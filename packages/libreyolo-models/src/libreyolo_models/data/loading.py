"""What every task's batch pipelines share: the ``gpu_augment`` choice, per-epoch shuffle seeds,
a training loader reseeded per epoch, and handing batches over from a side stream one ahead of
the training step."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, RandomSampler

import libreyolo_ddp

from ..errors import ConfigError
from .errors import DataConfigError


class _HasImages(Protocol):
    images: Tensor


T = TypeVar("T")
B = TypeVar("B", bound=_HasImages)


def resolve_gpu_augment(value: bool | str, device: torch.device) -> bool:
    """``gpu_augment``: ``"auto"`` renders batches on the device when it is a CUDA GPU."""
    if value == "auto":
        return device.type == "cuda"
    if isinstance(value, bool):
        return value
    raise ConfigError(f"gpu_augment={value!r} must be True, False or 'auto' (True on CUDA devices)")


def smaller_than_a_batch(name: str, n_images: int, batch_size: int, world_size: int,
                         problems: Sequence[object] = ()) -> ConfigError:
    """The error of a training split with fewer images than one batch per rank. When files of the
    split were skipped (``problems``: its ``DataProblem``s), they are the cause the message leads
    with, and it is a data error (the command line was fine); else lowering ``batch`` is the fix."""
    fix = f"lower batch to at most {max(1, n_images // world_size)} or add images"
    skipped = [p for p in problems if getattr(p, "skipped", False)]
    where = f"the {name} split has {n_images} usable images, fewer than one batch of {batch_size} on each of " \
            f"{world_size} rank(s)"
    if skipped:
        first = skipped[0]
        return DataConfigError(f"{where}: {len(skipped)} of its files were skipped (reasons in the warnings above; "
                               f"first: {getattr(first, 'path', '?')}: {getattr(first, 'reason', '?')}); fix those "
                               f"files, or {fix}")
    return ConfigError(f"{where}; {fix}")


def shuffle_seed(seed: int, rank: int, epoch: int) -> int:
    """The sampler seed of one rank's epoch: distinct per (seed, rank, epoch), the same on every run."""
    return int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0])


class EpochLoader:
    """One rank's training DataLoader whose shuffle and per-sample draws follow the epoch.

    ``make_dataset(rank, epoch_state)`` builds the dataset; ``epoch_state`` is a shared
    ``int64 [1]`` tensor holding the current epoch, which workers read to seed each sample's
    draws (``augment_draws.sample_rng``). ``set_epoch`` sets it and reseeds the shuffle, so an
    epoch's batches depend on (seed, rank, epoch) only. Distributed, the sampler is the DDP one.

    Raises:
        ConfigError: a bad seed, or fewer items than one batch on each rank (naming ``what``).
    """

    def __init__(self, make_dataset: Callable[[int, Tensor], Dataset], *, what: str, batch_size: int, workers: int,
                 seed: int, collate_fn: Callable[[Any], Any], pin_memory: bool) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be a non-negative integer (e.g. seed=0)")
        env = libreyolo_ddp.dist_env()
        self._seed, self._rank = seed, env.rank
        self._state = torch.tensor([0], dtype=torch.int64).share_memory_()
        dataset = make_dataset(env.rank, self._state)
        n = len(cast(Sized, dataset))  # map-style datasets have a length; torch's Dataset type does not say so
        self._shuffle = torch.Generator()
        self._shuffle.manual_seed(shuffle_seed(seed, env.rank, 0))
        distributed = libreyolo_ddp.is_dist_initialized() and env.world_size > 1
        self._loader = libreyolo_ddp.build_dataloader(
            dataset, batch_size=batch_size, shuffle=True, workers=workers, seed=seed, collate_fn=collate_fn,
            drop_last=True, pin_memory=pin_memory,
            sampler=None if distributed else RandomSampler(cast(Sized, dataset), generator=self._shuffle))
        if len(self._loader) == 0:
            raise ConfigError(f"the training split has {n} {what}, fewer than one batch of {batch_size} on each of "
                              f"{env.world_size} rank(s); lower batch to at most {max(1, n // env.world_size)} or "
                              f"add {what}")

    def set_epoch(self, epoch: int) -> None:
        """Reseed the shuffle and the draws for ``epoch``."""
        if epoch < 0:
            raise ConfigError(f"epoch={epoch} must be >= 0")
        self._state.fill_(epoch)
        self._shuffle.manual_seed(shuffle_seed(self._seed, self._rank, epoch))
        libreyolo_ddp.set_loader_epoch(self._loader, epoch)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._loader)


def one_ahead_on_side_stream(batches: Iterable[T], prepare: Callable[[T], B],
                              device: torch.device, stream: torch.cuda.Stream | None = None) -> Iterator[B]:
    """Prepare batch ``k + 1`` on ``stream`` (a new side stream if None) before handing out batch ``k``.

    The copy and rendering of the next batch then overlap the caller's step on its own stream.
    The caller's stream waits on an event before it touches a batch, and ``record_stream`` keeps
    the allocator from reusing the batch's memory until that stream is done with it.
    """
    stream = stream if stream is not None else torch.cuda.Stream(device=device)
    pending: tuple[B, torch.cuda.Event] | None = None
    for raw in batches:
        with torch.cuda.stream(stream):
            batch = prepare(raw)
            ready = torch.cuda.Event()
            ready.record(stream)
        if pending is not None:
            yield _hand_over(*pending, device)
        pending = (batch, ready)
    if pending is not None:
        yield _hand_over(*pending, device)


def _hand_over(batch: B, ready: torch.cuda.Event, device: torch.device) -> B:
    current = torch.cuda.current_stream(device)
    current.wait_event(ready)
    batch.images.record_stream(current)
    return batch
