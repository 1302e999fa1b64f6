"""Turn whatever a user passes to ``model(source)`` into RGB uint8 images with names.

Accepted: a file path (``~`` expanded), a folder (its images, sorted), a glob pattern, a numpy
image or batch, a torch tensor or batch, a PIL image, or a list, tuple or iterator (a stream) of
any of these. Pixels go through the one decoder (``data.decode``): files as a viewer shows them,
arrays and tensors by its documented value rule.

One input given alone that cannot be read raises ``SourceError`` naming it. Inside a folder, a
glob, a list or a stream, an unreadable item is skipped with one warning naming it and why, and
prediction carries on: the results of the good items are returned, and the skipped ones are
listed on the returned list (``ResultsList.skipped``). Videos and URLs are refused as unsupported
sources, with what to do instead.
"""

from __future__ import annotations

import glob
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from PIL import Image

from ..data.decode import (
    IMAGE_SUFFIXES,
    VIDEO_SUFFIXES,
    ImageDecodeError,
    Notes,
    array_to_rgb8,
    pil_to_rgb8,
    read_image_file,
    tensor_to_rgb8,
)
from ..errors import SourceError, abbreviated
from ..workers import usable_cores
from .daemon_pool import DaemonPool

__all__ = ["IMAGE_SUFFIXES", "SourceImage", "SourceReport", "expand_paths", "iter_sources"]

log = logging.getLogger(__name__)

P = TypeVar("P")
D = TypeVar("D")

MAX_DECODE_THREADS = 8
"""Most threads decoding image files at once. PIL releases the GIL while it decodes and resizes,
so threads multiply the images per second that reach the GPU, but each takes the GIL for its Python
part, and the main thread issuing the GPU work waits for it each time. On photographs (crops of
``tools/photos/``, 720p and 1080p JPEGs, about 10 ms each to read on the H100 machine's CPU) a folder
at batch 32, graphed, ran at 322 / 522 and 442 / 507 images/s with 4 / 8 / 12 threads (against 237
with eight processes; ``tools/probe_folder.py --set photos``, 2026-12-05). On cheap synthetic
JPEGs four threads had done better than eight (987 against 704 on the H200 machine): the GIL, not
the decoding, was the limit there; photographs are what users predict on."""


def decode_threads() -> int:
    """Threads decoding image files: the usable cores, at most ``MAX_DECODE_THREADS``."""
    return max(1, min(MAX_DECODE_THREADS, usable_cores()))


DECODE_TIMEOUT_S = 300.0
"""The longest one file may take to decode before predict gives up on it (bounds every wait)."""

_KINDS = "an image file, a folder, a glob, a numpy HxWx3 RGB array, a torch 3xHxW tensor, a PIL image, or a list of these"


@dataclass(frozen=True)
class SourceImage:
    """One decoded input: ``image`` is RGB uint8 ``[H, W, 3]``; ``name`` is a path or a label."""

    image: np.ndarray
    name: str


@dataclass
class SourceReport:
    """What reading a source left out, and the one-time notes it raised (filled while iterating).

    Attributes:
        skipped: ``(name, reason)`` per unreadable item of a folder, glob, list or stream.
        seen: items read or skipped so far.
        notes: one-time notes (e.g. float values read as 0-255), each logged once.
    """

    skipped: list[tuple[str, str]] = field(default_factory=list)
    seen: int = 0
    notes: Notes = field(default_factory=Notes)

    def skip(self, name: str, reason: str) -> None:
        self.skipped.append((name, reason))
        log.warning("skipped %s: %s", name, reason)


def expand_paths(source: str | Path) -> list[Path]:
    """A file, a folder (its images, sorted) or a glob pattern -> image paths (``~`` expanded).

    Raises:
        SourceError: an empty path, a URL, nothing matched, a folder without images, a video,
            or a path that does not exist.
    """
    text = str(source)
    if not text.strip():
        raise SourceError(f"source={text!r} is empty; pass {_KINDS}")
    if "://" in text:
        raise SourceError(f"{text}: unsupported source: URLs are not downloaded; download the file and pass "
                          "its path")
    try:
        return _expand(text, str(Path(text).expanduser()))
    except OSError as err:  # a name too long for the file system, a loop of links, no permission...
        raise SourceError(f"source {abbreviated(text)!r} cannot be read: {err.strerror or err}") from None


def _expand(text: str, expanded: str) -> list[Path]:
    if any(ch in expanded for ch in "*?["):
        files = _once_each(p for p in glob.glob(expanded, recursive=True) if _is_image_entry(Path(p)))
        if not files:
            raise SourceError(f"glob {text!r} matched no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
        return files
    path = Path(expanded)
    if path.suffix.lower() in VIDEO_SUFFIXES:
        raise SourceError(f"{text}: unsupported source: {path.suffix} is a video; LibreYOLO predicts on still "
                          f"images ({', '.join(sorted(IMAGE_SUFFIXES))}); extract frames first")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if _is_image_entry(p))
        if not files:
            raise SourceError(f"folder {text!r} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))})")
        return files
    if not path.exists():
        raise SourceError(f"source {text!r} does not exist (expected an image file, a folder or a glob)")
    return [path]


def _once_each(matches: Iterable[str]) -> list[Path]:
    """Glob matches, sorted, each file once: ``**`` follows links to folders, so a link back up the
    tree (``dir/loop -> dir``) yields the same files again under ever longer paths, until the
    file system's limit. A match whose folder resolves to one already seen, under the same name,
    is a repeat; the shortest path is kept. (Two names of one file in one folder both stay.)"""
    kept: dict[tuple[str, str], str] = {}
    for match in sorted(matches, key=lambda p: (p.count(os.sep), p)):
        key = (os.path.realpath(os.path.dirname(match) or "."), os.path.basename(match))
        kept.setdefault(key, match)
    return sorted(Path(p) for p in kept.values())


def _is_image_entry(path: Path) -> bool:
    """An image-named entry that is not a folder: a dangling link is kept, to be named as unreadable."""
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.is_dir()


def iter_sources(source: object, report: SourceReport | None = None) -> Iterator[SourceImage]:
    """Yield decoded images one at a time (a folder of thousands never sits in memory at once).

    Args:
        source: what ``model(source)`` was given (see the module docstring).
        report: collects skipped items and notes; a fresh one when None.

    Raises:
        SourceError: ``source`` is a single input that cannot be read, an empty list, or a
            collection none of whose items could be read.
    """
    report = report if report is not None else SourceReport()
    if _is_collection(source):
        yield from _collection(source, report)  # type: ignore[arg-type]
        return
    report.seen += 1
    yield from _one(source, "source", report, alone=True)


def _is_collection(source: object) -> bool:
    if isinstance(source, str | bytes | Path | np.ndarray | torch.Tensor | Image.Image | Mapping):
        return False
    return isinstance(source, Iterable)


def _collection(items: Iterable[object], report: SourceReport) -> Iterator[SourceImage]:
    produced = 0
    for idx, item in enumerate(items):
        report.seen += 1
        try:
            for image in _one(item, f"source[{idx}]", report, alone=False):
                produced += 1
                yield image
        except SourceError as err:
            name, reason = _split(err, f"source[{idx}]")
            report.skip(name, reason)
    if report.seen == 0:
        raise SourceError(f"the source list is empty; pass {_KINDS}")
    if produced == 0:
        name, reason = report.skipped[0]
        raise SourceError(f"none of the {report.seen} inputs could be read (first: {name}: {reason})")


def _one(item: object, label: str, report: SourceReport, *, alone: bool) -> Iterator[SourceImage]:
    """The images of one item; a folder or glob inside it skips its own bad files."""
    if isinstance(item, str | Path):
        paths = expand_paths(item)
        many = len(paths) > 1 or Path(str(item)).expanduser().is_dir() or any(c in str(item) for c in "*?[")
        for path, decoded in decoded_in_order(paths):
            if isinstance(decoded, ImageDecodeError):
                if alone and not many:
                    raise decoded
                report.skip(decoded.name, decoded.reason)
            else:
                yield SourceImage(decoded, str(path))
        if many and alone and len(report.skipped) == len(paths):
            name, reason = report.skipped[0]
            raise SourceError(f"none of the {len(paths)} images in {str(item)!r} could be read "
                              f"(first: {name}: {reason})")
    elif isinstance(item, np.ndarray):
        if item.ndim == 4:
            for j, image in enumerate(item):
                yield SourceImage(array_to_rgb8(image, f"{label}[{j}]", report.notes), f"{label}_{j}.jpg")
        else:
            yield SourceImage(array_to_rgb8(item, label, report.notes), f"{label}.jpg")
    elif isinstance(item, torch.Tensor):
        images = tensor_to_rgb8(item, label, report.notes)
        for j, image in enumerate(images):
            yield SourceImage(image, f"{label}_{j}.jpg" if item.dim() == 4 else f"{label}.jpg")
    elif isinstance(item, Image.Image):
        yield SourceImage(pil_to_rgb8(item, label), f"{label}.jpg")
    else:
        raise SourceError(f"{label}: unsupported source type {type(item).__name__}; use {_KINDS}")


def decoded_in_order(paths: Sequence[Path], threads: int | None = None
                     ) -> Iterator[tuple[Path, np.ndarray | ImageDecodeError]]:
    """Each path with its full picture (or why it cannot be read), in order (``decode_in_order``)."""
    return decode_in_order(paths, _decode_or_error, threads)


def decode_in_order(items: Sequence[P], read: Callable[[P], D], threads: int | None = None
                    ) -> Iterator[tuple[P, D | ImageDecodeError]]:
    """Each item with what ``read`` made of it (pixels, or why it cannot be read), in order,
    reading up to ``threads`` (default ``decode_threads()``) items ahead on a pool; closing the
    iterator early cancels what has not started. An item still being read after
    ``DECODE_TIMEOUT_S`` is reported as unreadable, so no wait is unbounded; its thread is a
    daemon (``daemon_pool``), so a read that never returns cannot keep the process from exiting.
    Several items take the pool even at ``threads=1`` (the timeout needs another thread); a single
    item is read in the caller's thread, with no thread hop on a one-image call (a read that
    never returns then blocks that thread as any read would, and Ctrl-C still ends it)."""
    if len(items) <= 1:
        for item in items:
            yield item, read(item)
        return
    threads = max(1, decode_threads() if threads is None else threads)
    pool = DaemonPool(min(threads, len(items)), "libreyolo-decode")
    pending: deque[tuple[P, Future[D]]] = deque()
    ahead = iter(items)
    try:
        for item in ahead:
            pending.append((item, pool.submit(read, item)))
            if len(pending) >= 2 * threads:
                break
        while pending:
            item, future = pending.popleft()
            following = next(ahead, None)
            if following is not None:
                pending.append((following, pool.submit(read, following)))
            try:
                yield item, future.result(timeout=DECODE_TIMEOUT_S)
            except TimeoutError:
                pool.add_thread()  # the stuck one is abandoned; the rest keep their pace
                yield item, stalled(item)
    finally:
        pool.shutdown()


def stalled(item: object) -> ImageDecodeError:
    """Why ``item`` was given up on: its decode outlasted ``DECODE_TIMEOUT_S`` (threads and
    processes alike)."""
    return ImageDecodeError(str(item), f"decoding took over {DECODE_TIMEOUT_S:.0f} s; "
                                       "is the file on a stalled network drive?")


def _decode_or_error(path: Path) -> np.ndarray | ImageDecodeError:
    try:
        return read_image_file(path)[0]
    except ImageDecodeError as err:
        return err


def _split(err: SourceError, label: str) -> tuple[str, str]:
    if isinstance(err, ImageDecodeError):
        return err.name, err.reason
    text = str(err)
    return label, text
