"""The stream API: every predict source as one lazy sequence of frames.

``model.predict(source, stream=True, vid_stride=1, ...)`` returns a generator that yields one
``Results`` per image or video frame, as soon as its batch is done; ``stream=False`` (the
default) returns them all as a list. With ``stream=True`` nothing is held beyond the batch in
flight and the next ``PREFETCH_BATCHES`` batches: a folder of thousands of images, an hour of
video or a camera that never ends run in constant memory. A background thread decodes the next
batches while the current one is on the GPU (``predict.prefetch``); every wait on it is bounded.

Each ``Results`` names where it came from:

- ``results.source`` (``str``): the file path, folder entry, URL, camera index (``"0"``), or a
  label for in-memory inputs (``"source"``, ``"source[2]"``);
- ``results.frame`` (``int | None``): the frame index within the video or stream (counting every
  decoded frame, so with ``vid_stride=3`` it is 0, 3, 6...), None for still images.

Sources (anything else raises ``SourceError`` naming it):

- still images: a file, a folder, a glob, a numpy array, a torch tensor, a PIL image, or a list
  of any of these (``predict.sources``);
- a video file (``.mp4``, ``.avi``, ``.mkv``, ``.mov``, ``.webm``...), a camera index (``0`` or
  ``"0"``), an ``rtsp://``/``rtmp://`` stream, or an http(s) URL serving video (``predict.video``,
  PyAV: the optional extra ``[video]``);
- an http(s) URL serving an image (downloaded in memory, bounded in time and size).

``vid_stride=k`` keeps every k-th frame of videos and streams (still images are unaffected).
A camera or network stream never ends, so it needs ``stream=True``: a list would grow forever.

A consumer such as a tracker reads ``source`` and ``frame`` to tell sequences apart and to see
skipped frames; results of one source arrive in frame order.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..data.decode import ImageDecodeError
from ..data.image_files import ShrunkImage, read_file_bytes, read_image, read_image_for
from ..errors import ConfigError, SourceError
from .decode_procs import decode_in_processes, decode_processes
from .gpu_jpeg import NO_PIXELS, EncodedJpeg, read_encoded
from .planar import PlanarFrame
from .sources import IMAGE_SUFFIXES, SourceReport, decode_in_order, expand_paths, iter_sources
from .video import STREAM_SCHEMES, VIDEO_SUFFIXES, is_video_path, iter_video, webcam_target

URL_TIMEOUT_S = 10.0
"""Seconds an image URL may take to connect and between received bytes."""

MAX_IMAGE_URL_BYTES = 256 << 20
"""Largest image body downloaded from a URL (a video URL is streamed, never downloaded)."""


@dataclass(frozen=True)
class Frame:
    """One decoded input on its way to the network.

    Attributes:
        image: RGB uint8 ``[H, W, 3]``; a reduced decode left for the device (``full`` set, predict
            on CUDA) may be ``[H, W, 4]``, RGB and PIL's padding byte (``data.pil_memory``), which
            ``Predictor._upload`` drops on the device.
        source: where it came from (see the module docstring).
        frame: index within a video or stream; None for a still image.
        name: file name used when saving (a path or a label with a suffix).
        fps: frame rate of the video it belongs to (None for still images or unknown).
        full: when ``image`` is a reduced decode of a larger picture (``data.image_files.read_image_for``),
            that picture's full size and a way to decode it; None when ``image`` is the picture.
        encoded: a JPEG file left for the device to decode (``predict.gpu_jpeg``); ``image`` is
            then empty (``gpu_jpeg.NO_PIXELS``).
        planar: a video frame left in yuv420p for the device to convert (``predict.planar``);
            ``image`` is then empty too.
    """

    image: np.ndarray
    source: str
    frame: int | None = None
    name: str = ""
    fps: float | None = None
    full: ShrunkImage | None = None
    encoded: EncodedJpeg | None = None
    planar: PlanarFrame | None = None

    @property
    def orig_shape(self) -> tuple[int, int]:
        """The picture's ``(h, w)``: ``image``'s, or the full size it was reduced from (or is encoded at)."""
        if self.encoded is not None:
            return self.encoded.orig_shape
        if self.planar is not None:
            return self.planar.orig_shape
        return self.full.orig_shape if self.full is not None else (self.image.shape[0], self.image.shape[1])


@dataclass(frozen=True)
class SourcePlan:
    """What ``source`` turned out to be, decided before any pixel is decoded."""

    frames: Iterator[Frame]
    is_live: bool  # a camera or network stream: no end
    count: int | None = None  # how many frames at most, when known before decoding (image files)
    one_video: bool = False  # one video file: its frames come from one decoder, one after another


def open_source(source: object, *, vid_stride: int = 1, report: SourceReport | None = None,
                shrink_to: int | None = None, gpu_jpeg: bool = False, planar_video: bool = False,
                resize_on_host: bool = True) -> SourcePlan:
    """Classify ``source`` now (so a missing file fails at the call) and decode it lazily.

    ``shrink_to``: the letterbox size the frames are for; image files that can decode smaller
    (large JPEGs, ``data.image_files.read_image_for``) then do, keeping their full picture on ``Frame.full``;
    ``resize_on_host=False`` leaves such a decode at its DCT scale's size for the device's letterbox
    to resize (predict on CUDA), instead of resizing it on the CPU.
    ``gpu_jpeg``: JPEG files are read, not decoded (``Frame.encoded``): the predictor decodes
    them on its device (``predict.gpu_jpeg``). ``planar_video``: yuv420p video frames stay planar
    (``Frame.planar``): the predictor converts them on its device (``predict.planar``).

    Unreadable items of a folder, glob or list are skipped into ``report`` (``predict.sources``
    rules: one input given alone that cannot be read is an error).

    Raises:
        ConfigError: ``vid_stride`` below 1.
        SourceError: a missing file or an unsupported kind of source (decoding errors surface
            while iterating, naming the source).
    """
    if isinstance(vid_stride, bool) or not isinstance(vid_stride, int) or vid_stride < 1:
        raise ConfigError(f"vid_stride={vid_stride!r} must be a whole number >= 1 (keep every n-th video frame)")
    report = report if report is not None else SourceReport()
    items = list(source) if isinstance(source, list | tuple) else [source]
    if not any(_special(item) for item in items):
        named = [item for item in items if isinstance(item, str | Path)]
        if items and len(named) == len(items):
            frames, count = _files(named, report, listed=isinstance(source, list | tuple), shrink_to=shrink_to,
                                   gpu_jpeg=gpu_jpeg, resize_on_host=resize_on_host)
            return SourcePlan(frames, is_live=False, count=count)
        return SourcePlan(_still(source, report), is_live=False)
    if not isinstance(source, list | tuple) and _special(source) == "video" and not Path(
            str(source)).expanduser().is_file():
        raise SourceError(f"video {str(source)!r} does not exist")
    live = any(_special(item) == "live" for item in items)
    return SourcePlan(_each(items, vid_stride, report, labelled=isinstance(source, list | tuple), planar=planar_video),
                      is_live=live, one_video=not isinstance(source, list | tuple) and _special(source) == "video")


def _special(item: object) -> str | None:
    """``"video"``, ``"live"``, ``"url"`` for sources this module reads, None for still images."""
    if isinstance(item, int) and not isinstance(item, bool):
        return "live"
    if not isinstance(item, str | Path):
        return None
    text = str(item)
    if text.isdigit():
        return "live"
    scheme = urlsplit(text).scheme.lower()
    if scheme in STREAM_SCHEMES:
        return "live"
    if scheme in ("http", "https"):
        return "url"
    return "video" if is_video_path(text) else None


def _files(items: list[str | Path], report: SourceReport, *, listed: bool, shrink_to: int | None = None,
           gpu_jpeg: bool = False, resize_on_host: bool = True) -> tuple[Iterator[Frame], int]:
    """Paths, folders and globs: expanded now (one given alone that is missing fails at the call;
    in a list it is skipped), then decoded in parallel; and how many files that is."""
    paths: list[Path | ImageDecodeError] = []  # a list item that named nothing: skipped in its place
    for idx, item in enumerate(items):
        try:
            paths += expand_paths(item)
        except SourceError as err:
            if not listed:
                raise
            paths.append(ImageDecodeError(f"source[{idx}]", str(err)))
    alone = not listed and len(paths) == 1 and paths[0] == Path(str(items[0])).expanduser()
    where = "inputs" if listed else f"images in {str(items[0])!r}"
    return decode_files(paths, report=report, alone=alone, where=where, shrink_to=shrink_to,
                        gpu_jpeg=gpu_jpeg, resize_on_host=resize_on_host), len(paths)


def decode_files(paths: list[Path | ImageDecodeError], workers: int | None = None, *, report: SourceReport | None = None,
                 alone: bool = False, where: str = "images", shrink_to: int | None = None,
                 processes: int | None = None, gpu_jpeg: bool = False, resize_on_host: bool = True) -> Iterator[Frame]:
    """Image files decoded in parallel, yielded in order: by worker processes where
    ``processes`` (default ``decode_procs.decode_processes``: none unless its cap is raised) says
    so, else by ``workers`` threads (default ``sources.decode_threads``; PIL releases the GIL
    while it decodes).

    A bounded number of decodes is in flight, so memory stays bounded for any number of files,
    and each may take at most ``sources.DECODE_TIMEOUT_S``; closing the generator cancels the
    ones not started. An unreadable file is skipped into ``report`` unless it was given
    ``alone``; if none could be read, that is an error naming the first. ``shrink_to``,
    ``resize_on_host`` and ``gpu_jpeg``: see ``open_source`` (with ``gpu_jpeg`` the threads or processes only read a JPEG's
    bytes and header, and hand those back).
    """
    report = report if report is not None else SourceReport()
    produced = 0
    read: Callable[[Path | ImageDecodeError], Decoded | EncodedJpeg]
    if gpu_jpeg and shrink_to is not None:  # JPEGs: bytes and a header; the rest decoded as below
        read = partial(_read_encoded_or_error, shrink_to=shrink_to, alone=alone, resize=resize_on_host)
    else:
        read = partial(_read_or_error, shrink_to=shrink_to, resize=resize_on_host)
    processes = decode_processes(len(paths)) if processes is None else processes
    decoded = decode_in_processes(paths, read, processes) if processes > 0 else decode_in_order(paths, read, workers)
    for path, image in decoded:
        report.seen += 1
        if isinstance(image, ImageDecodeError):
            if alone:
                raise image
            report.skip(image.name, image.reason)
            continue
        produced += 1
        if isinstance(image, EncodedJpeg):
            yield Frame(NO_PIXELS, str(path), None, str(path), encoded=image)
        elif isinstance(image, ShrunkImage):
            yield Frame(image.pixels, str(path), None, str(path), full=image if image.data is not None else None)
        else:
            yield Frame(image, str(path), None, str(path))
    if produced == 0 and report.skipped:
        name, reason = report.skipped[0]
        raise SourceError(f"none of the {report.seen} {where} could be read (first: {name}: {reason})")


Decoded = np.ndarray | ShrunkImage | ImageDecodeError


def _read_or_error(path: Path | ImageDecodeError, shrink_to: int | None = None, resize: bool = True) -> Decoded:
    if isinstance(path, ImageDecodeError):
        return path
    try:
        return read_image(path) if shrink_to is None else read_image_for(path, shrink_to, resize=resize)
    except ImageDecodeError as err:
        return err


def _read_encoded_or_error(path: Path | ImageDecodeError, shrink_to: int, alone: bool = False, resize: bool = True
                           ) -> Decoded | EncodedJpeg:
    """A JPEG's bytes for the device decoder (``gpu_jpeg.read_encoded``); any other file decoded
    here as ``_read_or_error`` does, from the bytes already read."""
    if isinstance(path, ImageDecodeError):
        return path
    try:
        data = read_file_bytes(path)
        return read_encoded(path, data, imgsz=shrink_to, alone=alone) or read_image_for(path, shrink_to, data,
                                                                                        resize=resize)
    except ImageDecodeError as err:
        return err


def _still(source: object, report: SourceReport) -> Iterator[Frame]:
    for item in iter_sources(source, report):
        yield Frame(item.image, item.name, None, item.name)


def _each(items: list[object], vid_stride: int, report: SourceReport, *, labelled: bool,
          planar: bool = False) -> Iterator[Frame]:
    for idx, item in enumerate(items):
        try:
            yield from _item(idx, item, vid_stride, report, labelled=labelled, planar=planar)
        except SourceError as err:
            if not labelled:
                raise
            named_file = isinstance(err, ImageDecodeError) and isinstance(item, str | Path)
            report.skip(err.name if named_file else f"source[{idx}]",  # type: ignore[attr-defined]
                        err.reason if isinstance(err, ImageDecodeError) else str(err))


def _item(idx: int, item: object, vid_stride: int, report: SourceReport, *, labelled: bool,
          planar: bool = False) -> Iterator[Frame]:
    """The frames of one item of a source list (a video, a stream, a URL or still images)."""
    kind = _special(item)
    if kind is None:
        for still in iter_sources(item, report):
            name = still.name.replace("source", f"source[{idx}]", 1) if labelled and still.name.startswith(
                "source") else still.name
            yield Frame(still.image, name, None, name)
    elif kind == "live" and (isinstance(item, int) or str(item).isdigit()):
        index = int(str(item))
        url, fmt = webcam_target(index)
        yield from _video(url, str(index), vid_stride, fmt=fmt, live=True, name=f"webcam{index}.mp4", planar=planar)
    elif kind == "live":
        yield from _video(str(item), str(item), vid_stride, live=True, planar=planar)
    elif kind == "url":
        yield from _url(str(item), vid_stride, planar=planar)
    else:
        path = Path(str(item)).expanduser()
        if not path.is_file():
            raise SourceError(f"video {str(item)!r} does not exist")
        yield from _video(str(path), str(item), vid_stride, planar=planar)


def _video(url: str, source: str, vid_stride: int, *, fmt: str | None = None, live: bool = False,
           name: str | None = None, planar: bool = False) -> Iterator[Frame]:
    label = name or (Path(urlsplit(source).path).name or "stream") if live else source
    for image, index, fps in iter_video(url, source=source, vid_stride=vid_stride, fmt=fmt, live=live, planar=planar):
        if isinstance(image, PlanarFrame):
            yield Frame(NO_PIXELS, source, index, label, fps, planar=image)
        else:
            yield Frame(image, source, index, label, fps)


def _url(url: str, vid_stride: int, *, planar: bool = False) -> Iterator[Frame]:
    """An http(s) URL: an image (by suffix or Content-Type) is downloaded, anything else is a video."""
    suffix = Path(urlsplit(url).path).suffix.lower()
    if suffix in VIDEO_SUFFIXES:
        yield from _video(url, url, vid_stride, live=True, name=Path(urlsplit(url).path).name, planar=planar)
        return
    body = fetch_url(url, image_only=suffix not in IMAGE_SUFFIXES)
    if body is None:  # served something else than an image: let FFmpeg read it as a video
        yield from _video(url, url, vid_stride, live=True, name=Path(urlsplit(url).path).name or "stream.mp4",
                          planar=planar)
        return
    yield Frame(decode_image_bytes(body, url), url, None, Path(urlsplit(url).path).name or "image.jpg")


def fetch_url(url: str, *, image_only: bool) -> bytes | None:
    """GET ``url`` (through httpx, the client the hub uses): the body, or None when
    ``image_only`` and the server says it is not an image.

    Raises:
        SourceError: an HTTP error status, unreachable, too slow, or larger than
            ``MAX_IMAGE_URL_BYTES``; the message names the URL.
    """
    import httpx2

    try:
        with httpx2.stream("GET", url, timeout=URL_TIMEOUT_S, follow_redirects=True) as response:
            if response.status_code >= 400:
                raise SourceError(f"{url}: the server answered HTTP {response.status_code}; check the URL")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if image_only and kind and not kind.startswith("image/"):
                return None
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_IMAGE_URL_BYTES:
                    raise SourceError(f"{url}: image is larger than {MAX_IMAGE_URL_BYTES >> 20} MiB; download it "
                                      "and pass the path")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx2.TimeoutException:
        raise SourceError(f"{url}: no answer within {URL_TIMEOUT_S:.0f} s") from None
    except httpx2.TransportError as err:
        raise SourceError(f"{url}: unreachable ({str(err) or type(err).__name__})") from None


def decode_image_bytes(body: bytes, name: str) -> np.ndarray:
    """An encoded image in memory -> RGB uint8 ``[H, W, 3]`` (EXIF orientation applied)."""
    try:
        with Image.open(io.BytesIO(body)) as im:
            if min(im.size) < 1:
                raise SourceError(f"{name}: image has no pixels ({im.size[0]}x{im.size[1]})")
            return np.array(ImageOps.exif_transpose(im).convert("RGB"))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        if isinstance(err, SourceError):
            raise
        raise SourceError(f"{name}: not a readable image ({err})") from None
