"""What every task's batch pipelines share: the ``gpu_augment`` choice, per-epoch shuffle seeds,
and handing batches over from a side stream one ahead of the training step."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError


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


def shuffle_seed(seed: int, rank: int, epoch: int) -> int:
    """The sampler seed of one rank's epoch: distinct per (seed, rank, epoch), the same on every run."""
    return int(np.random.SeedSequence([seed, rank, epoch]).generate_state(1)[0])


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
