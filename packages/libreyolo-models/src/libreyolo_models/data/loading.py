"""What every task's batch pipelines share: the ``gpu_augment`` choice, per-epoch shuffle seeds,
and handing batches over from a side stream one ahead of the training step."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
import torch
from torch import Tensor

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
