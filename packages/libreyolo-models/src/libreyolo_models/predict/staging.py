"""Pinned host buffers for whole batches, reused from batch to batch.

A GPU upload is asynchronous only from pinned (page-locked) memory, and pinning is costly the
first time: page-locking a new 720p frame took 1.36 ms on the H200 machine, against 0.07 ms to
copy it into memory already pinned (docs/benchmarks.md). Pinning every frame on its own leaves
that first-time cost to every batch until torch's pinned-memory cache has grown (for a short
video, most of its frames). So when a batch's frames share one size (the frames of a video, a
folder of same-size photos), they are copied into one pinned ``[N, H, W, 3]`` buffer taken from
a small ring, and the buffer goes back to the ring once the consumer has queued the upload from
it; it is written again only after that upload has finished (a CUDA event, polled with a
bounded wait). Batches of mixed sizes are pinned image by image as before.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

REUSE_WAIT_S = 10.0
"""Longest wait for a buffer's upload to finish before a fresh buffer is pinned instead."""
POLL_S = 0.001


class Staged(Protocol):
    """Pixels that write themselves into a pinned row (``predict.planar.PlanarFrame``)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The row's shape."""

    @property
    def planes(self) -> np.ndarray:
        """The pixels as an array (when rows of mixed shapes are pinned one by one)."""

    def copy_into(self, out: np.ndarray) -> None:
        """Write the pixels into ``out`` (``uint8``, ``shape``)."""


def host_tensors(images: list[np.ndarray]) -> list[Tensor]:
    """The decoded images as CPU tensors over the same memory (decoders hand out read-only
    arrays; predict only ever reads them, to copy them on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return [torch.from_numpy(image) for image in images]


@dataclass(eq=False)
class Slot:
    """One pinned batch buffer; ``done`` is recorded after the uploads from it were queued."""

    buffer: Tensor
    done: torch.cuda.Event | None = field(default=None)

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(self.buffer.shape)

    def ready(self) -> bool:
        return self.done is None or self.done.query()


class PinnedStaging:
    """A ring of at most ``capacity`` idle pinned batch buffers, shared by one producer thread
    (``stage``) and one consumer (``release``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._idle: deque[Slot] = deque()
        self._lock = threading.Lock()

    def stage(self, images: Sequence[np.ndarray | Staged]) -> tuple[list[Tensor], Slot | None]:
        """Pinned ``uint8 [H, W, 3]`` tensors holding ``images``' pixels, and the slot to release
        after their upload (None when the images were pinned one by one). An image may also be
        something that writes itself into the buffer (``Staged``: a video frame's planes, copied
        once from the decoder's memory)."""
        shape = tuple(images[0].shape)
        uniform = all(tuple(i.shape) == shape and (not isinstance(i, np.ndarray) or i.dtype == np.uint8) for i in images)
        if len(shape) != 3 or not uniform:
            arrays = [i if isinstance(i, np.ndarray) else i.planes.reshape(i.shape) for i in images]
            return [t.contiguous().pin_memory() for t in host_tensors(arrays)], None
        slot = self._take((len(images), *shape))
        for row, image in zip(slot.buffer, images):
            if isinstance(image, np.ndarray):
                row.copy_(host_tensors([image])[0])
            else:
                image.copy_into(row.numpy())
        return list(slot.buffer.unbind(0)), slot

    def release(self, slot: Slot, stream: torch.cuda.Stream) -> None:
        """The uploads from ``slot`` are queued on ``stream``: the buffer may be refilled once they ran."""
        slot.done = torch.cuda.Event()
        slot.done.record(stream)
        with self._lock:
            self._idle.append(slot)
            while len(self._idle) > self.capacity:
                self._idle.popleft()  # the oldest goes back to torch's pinned-memory cache

    def _take(self, key: tuple[int, ...]) -> Slot:
        deadline = time.monotonic() + REUSE_WAIT_S
        while True:
            with self._lock:
                matching = [s for s in self._idle if s.key == key]
                ready = next((s for s in matching if s.ready()), None)
                if ready is not None:
                    self._idle.remove(ready)
                    return ready
                if not matching or time.monotonic() > deadline:  # nothing to wait for: pin anew
                    return Slot(torch.empty(key, dtype=torch.uint8, pin_memory=True))
            time.sleep(POLL_S)  # an upload from a matching buffer is still running: it ends soon


__all__ = ["PinnedStaging", "Slot", "Staged", "host_tensors"]
