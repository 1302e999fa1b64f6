"""Video in and out for predict, through PyAV (FFmpeg's libraries, self-contained wheels).

PyAV is the optional extra ``video`` (``pip install 'libreyolo-models[video]'``): it decodes a
frame several times faster than OpenCV's Python bindings, its wheels carry their own FFmpeg (no
system package), and it writes H.264 as well as it reads, so the annotated video of
``save=True`` needs nothing else. It is imported when a video source is opened, never with this
module.

Every wait is bounded: opening a network stream and each read from it give up after
``STREAM_TIMEOUT_S`` (FFmpeg's own timeout), which ends the prefetch thread with an error
naming the stream rather than leaving it blocked.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import SourceError
from .planar import PlanarFrame, planar_frame

log = logging.getLogger(__name__)

VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".ts", ".wmv",
                            ".flv", ".3gp"})
"""File suffixes read as videos (compared in lower case)."""

STREAM_SCHEMES = frozenset({"rtsp", "rtsps", "rtmp", "rtmps", "srt", "udp", "tcp"})
"""URL schemes that are always video streams (http(s) URLs are told apart by what they serve)."""

STREAM_TIMEOUT_S = 10.0
"""Seconds FFmpeg may wait to open a stream and for each read from it."""

_EXTRA_HINT = "pip install 'libreyolo-models[video]' (PyAV)"


def require_av(source: str) -> ModuleType:
    """Import PyAV, or say which extra brings it and which source needed it."""
    try:
        import av
    except ImportError:
        raise SourceError(f"{source}: reading video needs PyAV, which is not installed; {_EXTRA_HINT}") from None
    return av


def is_video_path(text: str) -> bool:
    """A path whose suffix is a video format's."""
    return Path(text).suffix.lower() in VIDEO_SUFFIXES


def webcam_target(index: int) -> tuple[str, str]:
    """FFmpeg's ``(url, format)`` for camera ``index`` on this platform."""
    if sys.platform.startswith("linux"):
        return f"/dev/video{index}", "v4l2"
    if sys.platform == "darwin":
        return str(index), "avfoundation"
    raise SourceError(f"webcam {index}: cameras by index are supported on Linux (v4l2) and macOS (avfoundation), "
                      f"not on {sys.platform}; pass the camera's stream URL or a video file")


def iter_video(url: str, *, source: str, vid_stride: int = 1, fmt: str | None = None,
               live: bool = False, planar: bool = False) -> Iterator[tuple[np.ndarray | PlanarFrame, int, float | None]]:
    """Decode a video file, camera or stream: ``(RGB uint8 [H, W, 3], frame index, fps)`` per kept frame.

    Args:
        url: what FFmpeg opens (a path, ``/dev/video0``, an ``rtsp://`` URL).
        source: the user's name for it, used in every message.
        vid_stride: keep every ``vid_stride``-th frame (frame indices 0, stride, 2 * stride...);
            skipped frames are decoded (codecs need them) but never converted to RGB.
        fmt: FFmpeg input format (``v4l2`` for cameras), None to probe.
        live: a camera or network stream: open and read with ``STREAM_TIMEOUT_S``.
        planar: hand yuv420p frames over as their planes (``predict.planar.PlanarFrame``, for the
            device to convert) instead of RGB; frames of other formats stay RGB.

    Raises:
        SourceError: PyAV missing, the video cannot be opened, has no video track, or breaks
            off with a decoding error; the message names ``source``.
    """
    av = require_av(source)
    container = _open(av, url, source=source, fmt=fmt, live=live)
    try:
        if not container.streams.video:
            raise SourceError(f"{source}: has no video track (audio only, or not a video)")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"  # frame and slice threads inside FFmpeg
        fps = float(stream.average_rate) if stream.average_rate else None
        index = 0
        try:
            for frame in container.decode(stream):
                if index % vid_stride == 0:
                    kept = planar_frame(frame) if planar else None
                    yield (kept if kept is not None else frame.to_ndarray(format="rgb24")), index, fps
                index += 1
        except av.FFmpegError as err:
            raise SourceError(f"{source}: video decoding failed at frame {index}: {err}") from None
        if index == 0:
            raise SourceError(f"{source}: holds no decodable video frames (empty or unreadable video)")
    finally:
        container.close()


def _open(av: ModuleType, url: str, *, source: str, fmt: str | None, live: bool) -> Any:
    options = {"rtsp_transport": "tcp"} if url.startswith("rtsp") else {}
    try:
        return av.open(url, mode="r", format=fmt, options=options,
                       timeout=(STREAM_TIMEOUT_S, STREAM_TIMEOUT_S) if live else None)
    except FileNotFoundError:
        raise SourceError(f"{source}: does not exist" + (" (no such camera)" if fmt else "")) from None
    except av.FFmpegError as err:
        raise SourceError(f"{source}: cannot open as a video: {err}") from None


class VideoWriter:
    """Writes RGB frames to an H.264 (``.mp4``) file: the annotated video of ``save=True``.

    Opened on the first frame (its size fixes the video's); ``close()`` flushes the encoder.
    """

    def __init__(self, path: Path, fps: float | None) -> None:
        self.path = path
        self.fps = fps if fps and fps > 0 else 30.0
        self._container: Any = None
        self._stream: Any = None
        self.frames = 0

    def write(self, image: np.ndarray) -> None:
        """Append one RGB uint8 ``[H, W, 3]`` frame (H and W are cropped to even sizes for H.264)."""
        av = require_av(str(self.path))
        h, w = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
        if self._container is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._container = av.open(str(self.path), mode="w")
            rate = Fraction(self.fps).limit_denominator(1001)
            self._stream = self._container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4",
                                                      rate=rate)
            self._stream.width, self._stream.height = w, h
            self._stream.pix_fmt = "yuv420p"
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image[:h, :w]), format="rgb24")
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> None:
        """Flush the encoder and close the file (a writer that got no frame writes nothing)."""
        if self._container is None:
            return
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        self._container = None
        log.debug("wrote %d frames to %s", self.frames, self.path)
