"""Image files decoded by worker processes: a folder of many images on a machine of many cores.

Decoding threads (``sources.decode_in_order``) stop paying at about four: each takes the GIL for
the Python part of every file, and the thread issuing the GPU work then waits for it (a folder
of 720p JPEGs, graphed, ran at 987 images/s with four threads and 704 with eight on the H200
machine). Processes each have their own GIL, so the main thread's share of predict stays short
(measured there: preprocessing 0.14 -> 0.07 ms and post-processing 0.15 -> 0.04 ms an image,
predict 802 -> 863 and 777 -> 889 images/s with four threads against four processes, two runs;
``tools/probe_folder.py``). They are ``torch.utils.data`` workers, forked:

- they start in milliseconds with the decoder already imported (no interpreter to boot);
- a chunk of ``CHUNK_FILES`` files travels as one small message, its pixels written into a
  slot of shared memory mapped before the fork (``_Ring``) and copied out on arrival (no file
  descriptor passed per chunk, nothing left mapped however many results a caller keeps);
- results come back in order; a dead worker is detected, and every wait is bounded by
  ``sources.DECODE_TIMEOUT_S``: a chunk that takes longer is reported unreadable, file by file,
  and decoding goes on after it; if a worker dies (a decoder crashing on a file), the rest of the
  folder decodes on threads, with a warning.

Off by default (``MAX_DECODE_PROCESSES`` 0): on photographs, whose decoding rather than the GIL
is the limit, eight threads fed predict about twice what eight processes did (see that constant).
When raised, used for ``MIN_FILES`` files or more, on Linux, with at least four usable cores
(``decode_processes``); anything smaller decodes on threads, where a one-image call pays no
process start.
"""

from __future__ import annotations

import logging
import math
import mmap
import multiprocessing
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
from torch.utils.data import DataLoader, Dataset

import libreyolo_ddp

from ..data.decode import ImageDecodeError
from ..data.image_files import ShrunkImage
from ..workers import usable_cores
from . import sources
from .gpu_jpeg import EncodedJpeg

log = logging.getLogger(__name__)

P = TypeVar("P")
Decoded = np.ndarray | ShrunkImage | EncodedJpeg | ImageDecodeError
"""What a read function may return: pixels, a reduced decode, a JPEG left for the GPU, or why the
file cannot be read."""

CHUNK_FILES = 8
"""Files one worker decodes per message (fewer messages, one shared buffer for their pixels)."""

MIN_FILES = 64
"""Fewest files worth starting processes for; fewer decode on threads."""

MAX_DECODE_PROCESSES = 0
"""Most decoding processes; 0 (the default): always decode on threads. On photographs eight
processes fed predict 237 images/s where eight threads fed it 442-522 (``tools/probe_folder.py
--set photos``, H100 machine, 2026-12-05): each picture is copied twice more on the receiving
side, and the decoding itself, not the GIL, is the limit there. Raise it for folders of cheap
images on many cores, where processes had been 8-14 % faster than four threads."""

POLL_S = 5.0
"""Seconds between checks that the workers are alive while waiting for a chunk."""

PREFETCH_CHUNKS = 2
"""Chunks each worker decodes ahead."""

SLOT_BYTES = 16 << 20
"""Shared bytes per chunk in flight: eight 720p frames at half scale take 5.5 MB; a chunk that
does not fit (pictures far larger than the network input) travels by pickle instead."""

_FORK_WARNING = r".*use of fork\(\) may lead to deadlocks.*"
_NO_PIXELS = np.empty((0, 0, 3), np.uint8)


def decode_processes(n_files: int) -> int:
    """Worker processes to decode ``n_files`` with: a quarter of the usable cores, at least 2 and
    at most ``MAX_DECODE_PROCESSES``; 0 (decode on threads) for fewer than ``MIN_FILES`` files,
    fewer than four cores, or where processes cannot be forked (not Linux).

    A quarter, because each decoded picture is still copied twice on the receiving side (out of
    shared memory, into pinned memory) by one thread: on the 16-core H200 machine four processes
    fed predict faster than eight in one run of two (863 against 789 images/s) and about as fast
    in the other (889 against 906), ``tools/probe_folder.py``."""
    if n_files < MIN_FILES or not sys.platform.startswith("linux"):
        return 0
    if "fork" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Linux has it
        return 0
    cores = usable_cores()
    return min(MAX_DECODE_PROCESSES, max(2, cores // 4)) if cores >= 4 else 0


class _Ring:
    """Shared memory the workers write decoded chunks into: ``slots`` regions of ``slot_bytes``,
    one anonymous shared mapping made before the workers fork, so they inherit it (no file in
    ``/dev/shm``, no descriptor passed per chunk, pages reused from chunk to chunk).

    Chunk ``i`` of a loader uses slot ``i % slots``. A loader has at most ``workers *
    prefetch_factor`` chunks requested beyond the one its consumer holds, so with more slots than
    that a slot is rewritten only after its chunk was copied out."""

    def __init__(self, slots: int, slot_bytes: int) -> None:
        self.slots, self.slot_bytes = slots, slot_bytes
        self.memory = mmap.mmap(-1, slots * slot_bytes)  # MAP_SHARED | MAP_ANONYMOUS

    def region(self, index: int) -> memoryview:
        lo = (index % self.slots) * self.slot_bytes
        return memoryview(self.memory)[lo:lo + self.slot_bytes]

    def close(self) -> None:
        try:
            self.memory.close()
        except BufferError:  # a view of it is still referenced somewhere: the collector unmaps it
            pass


@dataclass
class _Packed:
    """One chunk's results with their pixels (and a reduced decode's file bytes) moved into its ring
    slot, each with where they lie; ``in_slot`` False: too large for the slot, carried as they are."""

    parts: list[tuple[Decoded, int, tuple[int, ...], int, int]]
    in_slot: bool


class _Chunks(Dataset[_Packed]):
    """Chunk ``i`` of ``items`` (from chunk ``first`` on), decoded by ``read`` in a worker."""

    def __init__(self, items: Sequence[P], read: Callable[[P], Decoded], chunk: int, first: int, ring: _Ring) -> None:
        self.items, self.read, self.chunk, self.first, self.ring = items, read, chunk, first, ring

    def __len__(self) -> int:
        return math.ceil(len(self.items) / self.chunk) - self.first

    def __getitem__(self, index: int) -> _Packed:
        lo = (self.first + index) * self.chunk
        return _pack([self.read(item) for item in self.items[lo:lo + self.chunk]], self.ring.region(index))


def _payload(result: Decoded) -> tuple[np.ndarray | None, bytes]:
    if isinstance(result, np.ndarray):
        return result, b""
    if isinstance(result, ShrunkImage):
        return result.pixels, result.data or b""
    if isinstance(result, EncodedJpeg):  # a JPEG left for the GPU: its bytes travel, no pixels
        return None, result.data
    return None, b""


def _pack(results: list[Decoded], slot: memoryview) -> _Packed:
    payloads = [_payload(r) for r in results]
    if sum((0 if a is None else a.nbytes) + len(b) for a, b in payloads) > len(slot):
        return _Packed([(r, 0, (), 0, 0) for r in results], in_slot=False)
    parts: list[tuple[Decoded, int, tuple[int, ...], int, int]] = []
    offset = 0
    for result, (array, data) in zip(results, payloads):
        if isinstance(result, EncodedJpeg):
            slot[offset:offset + len(data)] = data
            parts.append((replace(result, data=b""), 0, (), offset, len(data)))
            offset += len(data)
            continue
        if array is None:  # an error: nothing to carry but itself
            parts.append((result, 0, (), 0, 0))
            continue
        pixels_at = offset
        np.frombuffer(slot, np.uint8, array.nbytes, offset).reshape(array.shape)[...] = array
        offset += array.nbytes
        slot[offset:offset + len(data)] = data
        stripped = replace(result, pixels=_NO_PIXELS, data=None) if isinstance(result, ShrunkImage) else _NO_PIXELS
        parts.append((stripped, pixels_at, array.shape, offset, len(data)))
        offset += len(data)
    return _Packed(parts, in_slot=True)


def _unpack(packed: _Packed, slot: memoryview) -> list[Decoded]:
    """The chunk's results, their pixels and bytes copied out of the slot (which is then free)."""
    if not packed.in_slot:
        return [part[0] for part in packed.parts]
    out: list[Decoded] = []
    for result, pixels_at, shape, data_at, data_len in packed.parts:
        if isinstance(result, ImageDecodeError):
            out.append(result)
            continue
        if isinstance(result, EncodedJpeg):
            out.append(replace(result, data=bytes(slot[data_at:data_at + data_len])))
            continue
        pixels = np.frombuffer(slot, np.uint8, math.prod(shape), pixels_at).reshape(shape).copy()
        if isinstance(result, ShrunkImage):
            out.append(replace(result, pixels=pixels, data=bytes(slot[data_at:data_at + data_len]) or None))
        else:
            out.append(pixels)
    return out


def decode_in_processes(items: Sequence[P], read: Callable[[P], Decoded], processes: int, *,
                        chunk: int = CHUNK_FILES) -> Iterator[tuple[P, Decoded]]:
    """Each item with what ``read`` made of it, in order, decoded by ``processes`` forked workers
    (``sources.decode_in_order``'s contract: a slow chunk becomes unreadable files after
    ``sources.DECODE_TIMEOUT_S``, closing the iterator early stops the workers).

    ``read`` runs in the workers and returns pixels, a ``ShrunkImage``, an ``EncodedJpeg`` (its
    bytes travel back) or an ``ImageDecodeError``
    (it catches its own decoding errors: anything else it raises stops the iteration)."""
    first, n_chunks = 0, math.ceil(len(items) / chunk)
    while first < n_chunks:
        ring = _Ring(processes * PREFETCH_CHUNKS + 2, SLOT_BYTES)
        # The loader's own timeout is the poll: each expiry also checks that the workers live (a
        # longer one would leave a dead worker unnoticed that long); our bound is DECODE_TIMEOUT_S.
        poll = min(POLL_S, sources.DECODE_TIMEOUT_S)
        loader = DataLoader(_Chunks(items, read, chunk, first, ring), batch_size=None, num_workers=processes,
                            timeout=poll, multiprocessing_context="fork", prefetch_factor=PREFETCH_CHUNKS,
                            worker_init_fn=_decoder_start)
        with warnings.catch_warnings():  # the workers only decode: no lock of ours is taken in them
            warnings.filterwarnings("ignore", message=_FORK_WARNING, category=DeprecationWarning)
            batches = iter(loader)
        try:
            for index in range(n_chunks - first):
                packed = _next_chunk(batches, poll)
                lo = first * chunk
                if packed is None:  # stalled: its files are reported, the rest decode afresh
                    for item in items[lo:lo + chunk]:
                        yield item, sources.stalled(item)
                    first += 1
                    break
                yield from zip(items[lo:lo + chunk], _unpack(packed, ring.region(index)))
                first += 1
        except _WorkerDied as err:
            log.warning("a decoding process died (%s); decoding the remaining %d files on threads",
                        err, len(items) - first * chunk)
            yield from sources.decode_in_order(items[first * chunk:], read)
            return
        finally:  # stop the workers now, not whenever the iterator is collected (joins are bounded)
            shutdown = getattr(batches, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            ring.close()


def _decoder_start(worker_id: int) -> None:
    libreyolo_ddp.exit_with_parent()  # a decoder stuck in a read never outlives predict's process


class _WorkerDied(Exception):
    pass


def _next_chunk(batches: Iterator[_Packed], poll: float) -> _Packed | None:
    """The next chunk, or None when it took longer than ``sources.DECODE_TIMEOUT_S``.

    Raises:
        _WorkerDied: a worker process exited (a crash in a decoder).
    """
    waited = 0.0
    while True:
        try:
            return next(batches)
        except RuntimeError as err:
            if "exited unexpectedly" in str(err) or "killed by signal" in str(err):
                raise _WorkerDied(str(err)) from None
            if "timed out" not in str(err):
                raise
            waited += poll
            if waited >= sources.DECODE_TIMEOUT_S:
                return None


__all__ = ["CHUNK_FILES", "MAX_DECODE_PROCESSES", "MIN_FILES", "decode_in_processes", "decode_processes"]
